"""The cli (external script) and llm (judge model) graders."""

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conftest import done_tasks, load_state, run_eval
from json_reply import reply_json
from llama_eval.grading.graders import GradingError, JudgeGrader, ScriptGrader, parse_judge_verdict
from llama_eval.http_client import ChatClient

VERDICTS = [
    ("Yes", True),
    ("No", False),
    ("yes.", True),
    ("NO", False),
    ("**Yes**", True),
    ("No, the candidate gives 5 but the reference is 6.", False),
    ("Yes - both equal 3/4.", True),
    ("<think>The reference is 5, is 5.0 the same? yes it is... but wait</think>\nNo", False),
    ("Hmm, let me compare.</think>Yes", True),
    ("The two answers are not equivalent.", False),
    ("The answers are equivalent.", True),
    ("Verdict: NO", False),
    ("After checking units and value carefully, my verdict: yes", True),
    ("\\boxed{No}", False),
    ("Incorrect.", False),
    ("Correct", True),
    ("The candidate answer matches, so the answer is yes.", True),
    ("I am not sure.", None),
    ("", None),
]


@pytest.mark.parametrize("reply,expected", VERDICTS)
def test_parse_judge_verdict(reply, expected):
    assert parse_judge_verdict(reply) is expected


class JudgeHandler(BaseHTTPRequestHandler):
    """A judge that says yes exactly when the candidate equals the reference,
    in a different wording each time, to exercise the verdict parser."""
    protocol_version = "HTTP/1.1"
    wordings = ("Yes", "<think>compare them</think>\nYes, they match.", "**Verdict:** yes")
    refusals = ("No", "No, they differ.", "The answers are not equivalent.")
    calls = 0

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        reference = re.search(r"^Reference answer: (.*)$", prompt, re.M).group(1).strip()
        candidate = re.search(r"^Candidate answer: (.*)$", prompt, re.M).group(1).strip()
        JudgeHandler.calls += 1
        pool = self.wordings if candidate == reference else self.refusals
        reply = {"choices": [{"message": {"role": "assistant", "content": pool[JudgeHandler.calls % 3]},
                              "finish_reason": "stop"}]}
        reply_json(self, reply)


@pytest.fixture
def judge_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), JudgeHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_llm_grader_end_to_end(simulator, judge_url, tmp_path):
    sim = simulator("--success-rate", "0.5", "--seed", "3")
    out = tmp_path / "judged.json"
    result = run_eval("--server", sim.url, "--dataset", "aime2025", "--n-cases", "20", "--threads", "4",
                      "--grader", "llm", "--judge-server", judge_url, "--judge-model", "judge",
                      "--output", str(out))
    assert result.returncode == 0, result.stderr
    tasks = done_tasks(load_state(out))
    assert len(tasks) == 20
    # The judge only sees extracted answers; its verdict must equal the exact-match verdict.
    for task in tasks:
        assert task["correct"] is (task["extracted"] == task["reference"]), task
        assert task["grade_detail"]
    assert 0 < sum(t["correct"] for t in tasks) < 20


def test_llm_grader_unclear_verdict_is_a_task_error(judge_url):
    class Mumbling(ChatClient):
        def complete(self, payload, should_stop=lambda: False):
            from llama_eval.http_client import Completion
            return Completion(content="Hard to say.")

    grader = JudgeGrader(Mumbling(judge_url), None)
    with pytest.raises(GradingError, match="no yes/no verdict"):
        grader.grade({"reference": "5", "question": "q"}, "\\boxed{5}")


def write_script(path, body):
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_script_grader_passes_predicted_and_reference(tmp_path):
    script = write_script(tmp_path / "grade.sh", '[ "$1" = "$2" ] && [ -n "$LLAMA_EVAL_RESPONSE" ]\n')
    grader = ScriptGrader(str(script))
    assert grader.grade({"reference": "42", "question": "q"}, "so \\boxed{42}").correct
    assert not grader.grade({"reference": "42", "question": "q"}, "so \\boxed{41}").correct


def test_script_grader_end_to_end(simulator, tmp_path):
    sim = simulator("--success-rate", "0.6", "--seed", "5")
    # Numeric comparison in the script itself: "025" and "25" are equal for test(1) -eq.
    script = write_script(tmp_path / "numeq.sh", 'test "$1" -eq "$2" 2>/dev/null\n')
    out = tmp_path / "cli.json"
    result = run_eval("--server", sim.url, "--dataset", "aime2024", "--n-cases", "15", "--threads", "3",
                      "--grader", "cli", "--grader-script", str(script), "--output", str(out))
    assert result.returncode == 0, result.stderr
    tasks = done_tasks(load_state(out))
    assert len(tasks) == 15
    for task in tasks:
        assert task["correct"] is (int(task["extracted"]) == int(task["reference"])), task
