"""Several servers sharing one queue, and servers dying during a run."""

from collections import Counter

from conftest import done_tasks, load_state, read_state_if_any, run_eval, start_eval, wait_until

FAST_FAILURE = ("--retries", "1", "--retry-backoff", "0.01", "--max-server-failures", "2", "--timeout", "10")


def servers_of(state):
    return Counter(t["server"] for t in done_tasks(state))


def test_two_servers_share_the_work_and_the_faster_takes_more(simulator, tmp_path):
    fast = simulator("--latency-ms", "5")
    slow = simulator("--latency-ms", "80")
    out = tmp_path / "state.json"
    result = run_eval("--server", f"{fast.url},{slow.url}", "--server-name", "fast,slow", "--threads", "2,2",
                      "--dataset", "gsm8k", "--n-cases", "60", "--output", str(out))
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    counts = servers_of(state)
    assert sum(counts.values()) == 60
    assert counts["slow"] >= 1 and counts["fast"] > counts["slow"]
    assert set(state["by_server"]) == {"fast", "slow"}
    assert state["by_server"]["fast"]["n"] == counts["fast"]
    assert "fast" in result.stdout and "slow" in result.stdout


def test_server_killed_mid_run_loses_no_cases(simulator, tmp_path):
    survivor = simulator("--latency-ms", "30")
    victim = simulator("--latency-ms", "30")
    out = tmp_path / "state.json"
    run = start_eval("--server", f"{survivor.url},{victim.url}", "--server-name", "survivor,victim",
                     "--threads", "2,2", "--dataset", "gsm8k", "--n-cases", "60", "--save-interval", "0",
                     "--output", str(out), *FAST_FAILURE)
    wait_until(lambda: servers_of(read_state_if_any(out) or {"tasks": {}})["victim"] >= 5, 60,
               "the victim server to finish some tasks")
    victim.kill()
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 0, stderr
    assert "victim" in stderr and "taken out of rotation" in stderr
    assert load_state(out)["runs"][0]["removed_servers"] == ["victim"]
    state = load_state(out)
    assert state["summary"]["n"] == 60 and state["summary"]["errors"] == 0 and state["summary"]["pending"] == 0
    counts = servers_of(state)
    assert counts["victim"] >= 5 and counts["survivor"] + counts["victim"] == 60


def test_all_servers_dead_stops_with_clear_error_and_resume_finishes(simulator, tmp_path):
    first = simulator("--latency-ms", "40")
    out = tmp_path / "state.json"
    run = start_eval("--server", first.url, "--threads", "2", "--dataset", "aime2024", "--n-cases", "30",
                     "--save-interval", "0", "--output", str(out), *FAST_FAILURE)
    wait_until(lambda: len(done_tasks(read_state_if_any(out) or {"tasks": {}})) >= 4, 60, "some finished tasks")
    first.kill()
    stdout, stderr = run.communicate(timeout=120)
    assert run.returncode == 1
    assert "all servers failed" in stderr and "--resume" in stderr and "Traceback" not in stderr
    state = load_state(out)
    done_before = {t["id"]: t for t in done_tasks(state)}
    assert 4 <= len(done_before) < 30
    assert state["summary"]["errors"] == 0
    assert state["summary"]["pending"] == 30 - len(done_before)

    second = simulator()
    result = run_eval("--resume", "--output", str(out), "--server", second.url, "--threads", "4")
    assert result.returncode == 0, result.stderr
    state = load_state(out)
    assert len(done_tasks(state)) == 30
    for tid, task in done_before.items():
        assert state["tasks"][tid] == task  # finished work is kept as it was
    assert len(state["runs"]) == 2 and state["runs"][1]["servers"][0]["url"] == second.url
