"""llama-server's per-request fields id_slot, t_max_predict_ms,
timings_per_token and return_progress, and its CORS flags."""

import json

import requests

from server_harness import ServerProcess, assert_error

PROMPT = "Once upon a time"


def native_stream(server, **body):
    body.setdefault("prompt", PROMPT)
    r = server.post("/completion", {**body, "stream": True}, stream=True)
    assert r.status_code == 200, r.text
    return [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: ")]


def test_id_slot_picks_the_slot(server):
    for slot in (3, 1):
        r = server.post("/completion", {"prompt": PROMPT, "n_predict": 2, "id_slot": slot})
        assert r.status_code == 200, r.text
        assert r.json()["id_slot"] == slot
    assert_error(server.post("/completion", {"prompt": PROMPT, "id_slot": 9}), 400, param="id_slot")


def test_t_max_predict_ms_stops_after_a_line(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 480, "ignore_eos": True, "temperature": 0,
                                    "t_max_predict_ms": 1})
    body = r.json()
    assert body["stop_type"] == "limit"
    assert body["tokens_predicted"] < 480, body["tokens_predicted"]
    assert "\n" in body["content"]


def test_timings_per_token(server):
    events = native_stream(server, n_predict=6, ignore_eos=True, timings_per_token=True)
    counts = [e["timings"]["predicted_n"] for e in events[:-1] if "timings" in e]
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] <= 6
    plain = native_stream(server, n_predict=3, ignore_eos=True)
    assert all("timings" not in e for e in plain[:-1])


def test_return_progress():
    s = ServerProcess("-np", "1", "-c", "1024", "-b", "16", "-t", "1")
    try:
        prompt = "Once upon a time there was a little girl who lived by the sea. " * 4
        events = native_stream(s, prompt=prompt, n_predict=2, return_progress=True)
        progress = [e["prompt_progress"] for e in events if "prompt_progress" in e]
        assert len(progress) >= 3
        processed = [p["processed"] for p in progress]
        assert processed == sorted(processed) and processed[-1] == progress[-1]["total"]
        assert all(p["total"] == progress[0]["total"] > 16 for p in progress)
    finally:
        assert s.stop() == 0


def test_cors(server):
    r = requests.options(server.base + "/v1/chat/completions", headers={"Origin": "http://example.com"}, timeout=10)
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "http://example.com"  # "*" with credentials: echoed
    assert r.headers["Access-Control-Allow-Methods"] == "GET, POST, DELETE, OPTIONS"
    assert r.headers["Access-Control-Allow-Credentials"] == "true"
    s = ServerProcess("-np", "1", "-t", "1", "--cors-origins", "localhost", "--cors-methods", "GET, POST")
    try:
        local = requests.get(s.base + "/health", headers={"Origin": "http://localhost:3000"}, timeout=10)
        assert local.headers.get("Access-Control-Allow-Origin") == "http://localhost:3000"
        other = requests.get(s.base + "/health", headers={"Origin": "http://evil.example"}, timeout=10)
        assert "Access-Control-Allow-Origin" not in other.headers
        pre = requests.options(s.base + "/v1/models", headers={"Origin": "http://127.0.0.1:8000"}, timeout=10)
        assert pre.headers["Access-Control-Allow-Methods"] == "GET, POST"
    finally:
        assert s.stop() == 0
    s = ServerProcess("-np", "1", "-t", "1", "--cors-origins", "https://app.example", "--no-cors-credentials")
    try:
        r = requests.options(s.base + "/v1/models", headers={"Origin": "http://other"}, timeout=10)
        assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        assert r.headers["Access-Control-Allow-Credentials"] == "false"
    finally:
        assert s.stop() == 0
