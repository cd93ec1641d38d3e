"""llama-eval takes its peer tool's command lines as they are, and runs on a
Python that lacks tqdm (a plain progress line instead of the bar)."""

import io
import os
import subprocess

from conftest import EVAL_SCRIPT, PYTHON, load_state, run_eval
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
