"""--resume after a killed run, after failed tasks, and its configuration checks."""

import signal

from conftest import done_tasks, load_state, read_state_if_any, run_eval, start_eval, wait_until


def test_resume_after_killed_eval_runs_exactly_the_missing_tasks(simulator, tmp_path):
    sim = simulator("--latency-ms", "40", "--success-rate", "0.5")
    out = tmp_path / "state.json"
    args = ("--server", sim.url, "--dataset", "gsm8k", "--n-cases", "40", "--threads", "2", "--output", str(out))
    run = start_eval(*args, "--save-interval", "0")
    wait_until(lambda: len(done_tasks(read_state_if_any(out) or {"tasks": {}})) >= 5, 60, "some finished tasks")
    run.send_signal(signal.SIGKILL)
    run.communicate(timeout=30)
    before = load_state(out)
    done_before = {t["id"]: t for t in done_tasks(before)}
    assert 5 <= len(done_before) < 40
    requests_before = sim.stats()["requests"]

    result = run_eval("--resume", "--output", str(out))  # servers come from the state file
    assert result.returncode == 0, result.stderr
    assert f"{len(done_before)} task(s) done, {40 - len(done_before)} to run" in result.stderr
    after = load_state(out)
    assert len(done_tasks(after)) == 40 and after["summary"]["n"] == 40
    rerun = [t for t in after["tasks"].values() if t["run"] == 1]
    assert len(rerun) == 40 - len(done_before)
    assert not set(t["id"] for t in rerun) & set(done_before)
    for tid, task in done_before.items():
        assert after["tasks"][tid] == task
    # One request per missing task, none for tasks already done.
    assert sim.stats()["requests"] - requests_before == 40 - len(done_before)
    assert not list(tmp_path.glob(".state.json.*.tmp"))


def test_sigterm_saves_and_exits_130(simulator, tmp_path):
    sim = simulator("--latency-ms", "50")
    out = tmp_path / "state.json"
    run = start_eval("--server", sim.url, "--dataset", "gsm8k", "--n-cases", "60", "--threads", "1",
                     "--output", str(out))
    wait_until(lambda: (read_state_if_any(out) or {}).get("runs"), 30, "the run to start")
    wait_until(lambda: sim.stats()["requests"] >= 3, 30, "some requests")
    run.send_signal(signal.SIGTERM)
    _, stderr = run.communicate(timeout=30)
    assert run.returncode == 130 and "--resume" in stderr
    state = load_state(out)
    assert state["runs"][-1]["outcome"] == "interrupted"
    assert len(done_tasks(state)) >= 2


def test_resume_retries_failed_tasks(simulator, tmp_path):
    partial = simulator("--dataset", "gsm8k")  # does not know the AIME questions: 404 for those
    out = tmp_path / "state.json"
    result = run_eval("--server", partial.url, "--dataset", "gsm8k,aime2025", "--n-cases", "5",
                      "--output", str(out))
    assert result.returncode == 1
    state = load_state(out)
    assert state["summary"]["errors"] == 5 and state["by_dataset"]["gsm8k"]["n"] == 5
    assert all("not found" in t["error"] for t in state["tasks"].values() if t["status"] == "error")

    full = simulator()
    result = run_eval("--resume", "--output", str(out), "--server", full.url)
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert state["summary"]["n"] == 10 and state["summary"]["errors"] == 0
    assert all(t["error"] is None for t in state["tasks"].values())


def test_resume_rejects_conflicting_settings_and_accepts_equal_ones(simulator, tmp_path):
    sim = simulator()
    out = tmp_path / "state.json"
    base = ("--server", sim.url, "--dataset", "aime2025", "--n-cases", "3", "--temperature", "0.7")
    assert run_eval(*base, "--output", str(out)).returncode == 0
    for flag, value in (("--temperature", "0.2"), ("--seed", "7"), ("--n-cases", "5"), ("--dataset", "gsm8k"),
                        ("--grader", "mc"), ("--max-tokens", "100")):
        result = run_eval("--resume", "--output", str(out), flag, value)
        assert result.returncode == 2, (flag, result.stderr)
        assert "stored" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    result = run_eval("--resume", "--output", str(out), "--temperature", "0.7", "--n-cases", "3")
    assert result.returncode == 0 and "nothing to run" in result.stderr
    assert "aime2025" in result.stdout  # the summary is printed again


def test_existing_output_needs_resume_or_overwrite(simulator, tmp_path):
    sim = simulator()
    out = tmp_path / "state.json"
    args = ("--server", sim.url, "--dataset", "aime2025", "--n-cases", "2", "--output", str(out))
    assert run_eval(*args).returncode == 0
    result = run_eval(*args)
    assert result.returncode == 2 and "--resume" in result.stderr and "--overwrite" in result.stderr
    assert run_eval(*args, "--overwrite", "--n-cases", "4").returncode == 0
    assert load_state(out)["summary"]["n"] == 4
