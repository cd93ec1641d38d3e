"""Continuous batching: more requests than slots, and clients that leave."""

import json
import time
from concurrent.futures import ThreadPoolExecutor

import requests

from server_harness import ServerProcess

PROMPTS = [
    "Once upon a time, there was a little girl named Lily.",
    "One day, a big dog",
    "Tom and Sue went to the park.",
    "The sun was hot and",
    "Once upon a time, there was a little boy.",
    "Mom said",
    "The bird flew",
    "Once upon a time, there was a little girl named Lily. She",
]


def test_eight_requests_on_four_slots(server):
    def one(i):
        body = {"prompt": PROMPTS[i], "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        if i % 2:
            body = {"messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": 24,
                    "temperature": 0, "ignore_eos": True}
            return server.post("/v1/chat/completions", body)
        return server.post("/v1/completions", body)

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    for r in results:
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["usage"]["completion_tokens"] == 24
        assert body["choices"][0]["finish_reason"] == "length"
    props = server.settled_props()
    assert props["busy_slots"] == 0 and props["queued_requests"] == 0


def test_concurrent_greedy_matches_sequential(server):
    body = {"prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    alone = server.post("/v1/completions", body).json()["choices"][0]["text"]
    with ThreadPoolExecutor(6) as ex:
        texts = list(ex.map(lambda _: server.post("/v1/completions", body).json()["choices"][0]["text"],
                            range(6)))
    assert texts == [alone] * 6


def test_concurrent_streams(server):
    def one(i):
        r = server.post("/v1/completions", {"prompt": PROMPTS[i], "max_tokens": 10, "temperature": 0,
                                            "ignore_eos": True, "stream": True}, stream=True)
        lines = [l for l in r.iter_lines(decode_unicode=True) if l]
        return lines

    with ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(8)))
    for lines in results:
        assert lines[-1] == "data: [DONE]"
        last = json.loads(lines[-2][len("data: "):])
        assert last["choices"][0]["finish_reason"] == "length"


def wait_idle(server, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        p = server.get("/props").json()
        if p["busy_slots"] == 0 and p["queued_requests"] == 0:
            return True
        time.sleep(0.05)
    return False


def test_disconnect_frees_slot():
    # One slot, long generations: a client that leaves must not hold the slot.
    s = ServerProcess("-np", "1", "-c", "16384", "-t", "1")
    try:
        body = {"prompt": PROMPTS[0], "max_tokens": 16000, "temperature": 0, "ignore_eos": True, "stream": True}
        r = requests.post(s.base + "/v1/completions", json=body, stream=True, timeout=60)
        it = r.iter_lines()
        for _ in range(3):
            next(it)
        r.close()
        assert wait_idle(s), "slot still busy after the streaming client disconnected"

        # Non-streaming: the client times out and goes away.
        body["stream"] = False
        try:
            requests.post(s.base + "/v1/completions", json=body, timeout=0.5)
        except requests.exceptions.ReadTimeout:
            pass
        assert wait_idle(s), "slot still busy after the blocking client disconnected"
        assert "cancelled" in s.log_text()

        r = requests.post(s.base + "/v1/completions",
                          json={"prompt": "Hi", "max_tokens": 3, "temperature": 0, "ignore_eos": True}, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3
    finally:
        assert s.stop() == 0


def test_small_batch_chunks_prompts(server):
    # -b 8: prompts are decoded in chunks of at most 8 tokens, interleaved with
    # the other slot's generation; greedy output matches the default server.
    long_prompt = " ".join(PROMPTS)
    bodies = [{"prompt": p, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
              for p in (long_prompt, PROMPTS[1], PROMPTS[2])]
    expected = [server.post("/v1/completions", b).json()["choices"][0]["text"] for b in bodies]
    s = ServerProcess("-np", "2", "-c", "1024", "-b", "8", "-t", "1")
    try:
        with ThreadPoolExecutor(3) as ex:
            got = list(ex.map(lambda b: requests.post(s.base + "/v1/completions", json=b, timeout=60), bodies))
        for r, want in zip(got, expected):
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == want
    finally:
        assert s.stop() == 0
