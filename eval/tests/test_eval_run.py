"""End-to-end runs of llama-eval against the simulator."""

import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import done_tasks, gpqa_rows, load_state, run_eval, write_gpqa_csv
from json_reply import reply_json


def test_accuracy_matches_success_rate(simulator, tmp_path):
    sim = simulator("--success-rate", "0.7", "--seed", "1")
    out = tmp_path / "state.json"
    n = 150
    result = run_eval("--server", sim.url, "--dataset", "gsm8k", "--n-cases", str(n), "--threads", "8",
                      "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    summary = state["summary"]
    assert summary["n"] == n and summary["errors"] == 0 and summary["pending"] == 0
    bound = 4 * math.sqrt(0.7 * 0.3 / n)
    assert abs(summary["accuracy"] - 0.7) < bound
    low, high = summary["ci95"]
    assert low < summary["accuracy"] < high and high - low < 0.2
    # Every verdict agrees with what the simulator meant to answer.
    assert summary["correct"] == sim.stats()["correct"]
    assert "gsm8k" in result.stdout and "accuracy" in result.stdout


def test_perfect_server_scores_100_percent_with_streaming(simulator, tmp_path):
    sim = simulator("--success-rate", "1.0")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--dataset", "math500,aime2024", "--n-cases", "25", "--threads", "4",
                      "--stream", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert state["summary"]["accuracy"] == 1.0 and state["summary"]["n"] == 50
    assert all(t["ttft_s"] is not None and t["usage"]["completion_tokens"] > 0 for t in done_tasks(state))
    assert set(state["by_dataset"]) == {"math500", "aime2024"}


def test_repeats_report_pass_at_k_and_use_distinct_seeds(simulator, tmp_path):
    sim = simulator("--success-rate", "0.5", "--seed", "2")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--dataset", "aime2025", "--n-cases", "10", "--n-repeats", "4",
                      "--threads", "4", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    summary = state["summary"]
    assert summary["n"] == 40 and summary["cases"] == 10
    assert set(summary["pass_at_k"]) == {"1", "2", "4"}
    assert summary["pass_at_k"]["1"] == pytest.approx(summary["accuracy"])
    assert summary["pass_at_k"]["4"] >= summary["pass_at_k"]["2"] >= summary["pass_at_k"]["1"]
    by_case = {}
    for task in done_tasks(state):
        by_case.setdefault(task["case_id"], set()).add(task["correct"])
    assert any(len(outcomes) == 2 for outcomes in by_case.values())  # repeats are not copies
    assert "pass@4" in result.stdout


def test_log_and_html_outputs(simulator, tmp_path):
    sim = simulator("--success-rate", "0.6")
    out, log, html = tmp_path / "run.json", tmp_path / "cases.jsonl", tmp_path / "report.html"
    result = run_eval("--server", sim.url, "--dataset", "gsm8k,aime2025", "--n-cases", "8", "--threads", "2",
                      "--output", str(out), "--log", str(log), "--html", str(html))
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 16 and {line["id"] for line in lines} == set(load_state(out)["tasks"])
    page = html.read_text()
    assert page.startswith("<!DOCTYPE html>") and "data:image/png;base64,iVBOR" in page
    assert "aime2025" in page and "Wrong or failed tasks" in page


def test_default_log_is_next_to_output(simulator, tmp_path):
    sim = simulator()
    out = tmp_path / "my-run.json"
    result = run_eval("--server", sim.url, "--dataset", "aime2025", "--n-cases", "3", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert len((tmp_path / "my-run.cases.jsonl").read_text().splitlines()) == 3


class RecordingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests_seen = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        self._reply({"object": "list", "data": [{"id": "reported-model"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        RecordingHandler.requests_seen.append((dict(self.headers), body))
        self._reply({"choices": [{"message": {"role": "assistant", "content": "\\boxed{0}"},
                                  "finish_reason": "stop"}], "usage": {"completion_tokens": 1}})

    def _reply(self, obj):
        reply_json(self, obj)


@pytest.fixture
def recording_server():
    RecordingHandler.requests_seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), RecordingHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/"  # a /v1 suffix is accepted too
    server.shutdown()
    server.server_close()


def test_request_carries_sampling_settings_and_key(recording_server, tmp_path):
    out = tmp_path / "state.json"
    result = run_eval("--server", recording_server, "--dataset", "aime2024", "--n-cases", "2", "--n-repeats", "2",
                      "--temperature", "0.6", "--top-p", "0.95", "--top-k", "20", "--min-p", "0.05",
                      "--max-tokens", "512", "--seed", "100", "--system-prompt", "Think hard.",
                      "--api-key", "k123", "--threads", "1", "--output", str(out))
    assert result.returncode == 0, result.stderr
    seen = RecordingHandler.requests_seen
    assert len(seen) == 4
    for headers, body in seen:
        assert headers["Authorization"] == "Bearer k123"
        assert body["temperature"] == 0.6 and body["top_p"] == 0.95 and body["top_k"] == 20
        assert body["min_p"] == 0.05 and body["max_tokens"] == 512
        assert body["model"] == "reported-model"  # from /v1/models, as --model was not given
        assert body["messages"][0] == {"role": "system", "content": "Think hard."}
        assert body["stream"] is False
    assert sorted(body["seed"] for _, body in seen) == [100, 100, 101, 101]
    state = load_state(out)
    assert "k123" not in json.dumps(state)  # secrets are never stored
    assert state["config"]["sampling"]["temperature"] == 0.6


def test_wrong_api_key_fails_tasks_but_not_the_server(simulator, tmp_path):
    sim = simulator("--api-key", "right")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--api-key", "wrong", "--dataset", "aime2025", "--n-cases", "4",
                      "--output", str(out), "--retry-backoff", "0.01")
    assert result.returncode == 1
    state = load_state(out)
    assert state["summary"]["errors"] == 4
    assert all("HTTP 401" in t["error"] for t in state["tasks"].values())
    assert "taken out of rotation" not in result.stderr
    assert "--resume" in result.stderr


def test_transient_errors_are_retried(simulator, tmp_path):
    sim = simulator("--error-rate", "0.3", "--seed", "4")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--dataset", "gsm8k", "--n-cases", "30", "--threads", "4",
                      "--retries", "8", "--retry-backoff", "0.01", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert state["summary"]["n"] == 30 and state["summary"]["errors"] == 0
    assert sim.stats()["injected_errors"] > 0
    assert any(t["attempts"] > 1 for t in done_tasks(state))


def test_gpqa_from_user_file_is_graded_as_multiple_choice(simulator, tmp_path):
    gpqa = tmp_path / "gpqa_diamond.csv"
    write_gpqa_csv(gpqa, gpqa_rows(30))
    sim = simulator("--dataset", "gsm8k", "--gpqa-file", str(gpqa), "--success-rate", "0.5", "--seed", "8")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--gpqa-file", str(gpqa), "--threads", "4", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert state["config"]["grader"]["per_dataset"] == {"gpqa": "mc"}
    assert state["summary"]["n"] == 30 and state["summary"]["correct"] == sim.stats()["correct"]
    assert all(t["extracted"] in "ABCD" for t in done_tasks(state))
    assert 5 < state["summary"]["correct"] < 25


def test_custom_dataset_file_with_field_mapping(simulator, tmp_path):
    data = tmp_path / "arith.jsonl"
    data.write_text("\n".join(json.dumps({"item": {"prompt": f"What is {i} plus {i + 7}?"}, "gold": 2 * i + 7})
                              for i in range(12)) + "\n")
    sim = simulator("--dataset", "aime2025", "--dataset-file", str(data), "--question-field", "item.prompt",
                    "--answer-field", "gold", "--success-rate", "1.0")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--dataset-file", str(data), "--question-field", "item.prompt",
                      "--answer-field", "gold", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert set(state["by_dataset"]) == {"arith"} and state["summary"]["accuracy"] == 1.0
