"""llama-eval takes its peer tool's command lines as they are, and runs on a
Python that lacks tqdm (a plain progress line instead of the bar)."""

import io
import os
import subprocess

from conftest import EVAL_SCRIPT, PYTHON, load_state, run_eval
from llama_eval.cli import build_parser
from llama_eval.plan import _grader_config
from llama_eval.run import PlainProgress, progress_bar


def test_peer_command_line_runs_verbatim(simulator, tmp_path):
    sim = simulator("--success-rate", "1.0")
    out = tmp_path / "state.json"
    # The peer tool's README quick start, with this simulator's URL.
    result = run_eval("--server", sim.url, "--model", "my-model", "--dataset", "gsm8k", "--n_cases", "12",
                      "--grader-type", "regex", "--threads", "4", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert state["summary"]["n"] == 12 and state["summary"]["accuracy"] == 1.0
    assert state["config"]["grader"]["type"] == "regex", state["config"]["grader"]


def test_without_tqdm_progress_is_a_plain_line(simulator, tmp_path):
    sim = simulator("--success-rate", "1.0")
    blocker = tmp_path / "no-tqdm" / "tqdm"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('tqdm is not installed here')\n")
    env = dict(os.environ, PYTHONPATH=str(blocker.parent))
    result = subprocess.run([PYTHON, str(EVAL_SCRIPT), "--server", sim.url, "--dataset", "gsm8k", "--n-cases", "6",
                             "--threads", "2", "--output", str(tmp_path / "state.json")],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "llama-eval: 6/6 tasks" in result.stderr, result.stderr


def test_plain_progress_prints_at_most_once_an_interval_and_at_the_end():
    now = [0.0]
    out = io.StringIO()
    bar = PlainProgress(total=5, enabled=True, file=out, clock=lambda: now[0], interval=1.0)
    for i in range(4):
        bar.set_postfix(acc="50.0%", errors=0)
        bar.update(1)
        now[0] += 0.3
    bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines == ["llama-eval: 1/5 tasks, acc 50.0%, errors 0", "llama-eval: 5/5 tasks, acc 50.0%, errors 0"]
    quiet = io.StringIO()
    silent = PlainProgress(total=2, enabled=False, file=quiet)
    silent.update(2)
    silent.close()
    assert quiet.getvalue() == ""


def test_progress_bar_uses_tqdm_where_given():
    made = {}

    class FakeBar:
        def __init__(self, **kwargs):
            made.update(kwargs)

    assert isinstance(progress_bar(3, True, bar_class=FakeBar), FakeBar)
    assert made["total"] == 3 and made["disable"] is False


def test_peer_flags_for_limits_and_output(simulator, tmp_path):
    sim = simulator("--success-rate", "1.0")
    out = tmp_path / "state.json"
    # --n_predict -1: no limit, the peer tool's default; --verbose: a line per case.
    result = run_eval("--server", sim.url, "--dataset", "gsm8k", "--n_cases", "3", "--n_predict", "-1",
                      "--grader-type", "regex", "--verbose", "--threads", "1", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert load_state(out)["config"]["sampling"]["max_tokens"] is None
    lines = [l for l in result.stderr.splitlines() if "reference" in l]
    assert len(lines) == 3, result.stderr
    assert all(l.startswith("gsm8k") and l.endswith(": correct") for l in lines), lines
    out2 = tmp_path / "state2.json"
    result = run_eval("--server", sim.url, "--dataset", "gsm8k", "--n_cases", "2", "--n_predict", "64",
                      "--output", str(out2))
    assert result.returncode == 0, result.stderr
    assert load_state(out2)["config"]["sampling"]["max_tokens"] == 64
    assert run_eval("--server", sim.url, "--dataset", "gsm8k", "--n_predict", "0",
                    "--output", str(tmp_path / "bad.json")).returncode == 2


def test_peer_judge_defaults_to_the_model_under_test():
    def grader(*flags):
        return _grader_config(build_parser().parse_args(["--dataset", "gsm8k", "--grader-type", "llm", *flags]))

    # As the peer tool: the first server and --model judge unless told otherwise.
    g = grader("--server", "http://127.0.0.1:9/,http://127.0.0.1:10", "--model", "m")
    assert (g["judge_server"], g["judge_model"]) == ("http://127.0.0.1:9", "m")
    g = grader("--server", "http://127.0.0.1:9", "--model", "m", "--grader-server", "http://127.0.0.1:11",
               "--grader-model", "judge")
    assert (g["judge_server"], g["judge_model"]) == ("http://127.0.0.1:11", "judge")


def test_peer_dataset_names(simulator, tmp_path):
    sim = simulator("--success-rate", "1.0")
    out = tmp_path / "state.json"
    result = run_eval("--server", sim.url, "--dataset", "aime", "--n_cases", "2", "--grader-type", "regex",
                      "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "--dataset aime:" in result.stderr and "running aime2024" in result.stderr
    assert [d["name"] for d in load_state(out)["config"]["datasets"]] == ["aime2024"]
    refused = run_eval("--server", sim.url, "--dataset", "aime2026", "--output", str(tmp_path / "no.json"))
    assert refused.returncode == 2
    assert "aime2026" in refused.stderr and "--dataset-file" in refused.stderr
