"""--compare: paired comparison of two state files."""

import json

import pytest

from conftest import SimulatorProcess, load_state, run_eval


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same 30 questions answered by two servers that err on different questions."""
    paths, directory = [], tmp_path_factory.mktemp("runs")
    for seed in ("1", "2"):
        sim = SimulatorProcess("--success-rate", "0.6", "--seed", seed)
        try:
            path = directory / f"run{seed}.json"
            result = run_eval("--server", sim.url, "--dataset", "gsm8k", "--n-cases", "30", "--threads", "4",
                              "--output", str(path))
        finally:
            sim.kill()
        assert result.returncode == 0, result.stderr
        paths.append(path)
    return paths


def test_compare_counts_and_changed_cases(two_runs, tmp_path):
    path_a, path_b = two_runs
    json_out = tmp_path / "cmp.json"
    result = run_eval("--compare", str(path_a), str(path_b), "--compare-json", str(json_out))
    assert result.returncode == 0, result.stderr
    a, b = load_state(path_a)["tasks"], load_state(path_b)["tasks"]
    expected_changed = sorted(tid for tid in a if a[tid]["correct"] != b[tid]["correct"])
    cmp = json.loads(json_out.read_text())
    assert cmp["matched"] == 30 and cmp["only_in_a"] == cmp["only_in_b"] == 0
    assert sorted(c["task"] for c in cmp["changed"]) == expected_changed
    assert cmp["only_a_correct"] + cmp["only_b_correct"] == len(expected_changed) > 0
    assert cmp["both_correct"] == sum(a[t]["correct"] and b[t]["correct"] for t in a)
    acc_a = sum(t["correct"] for t in a.values()) / 30
    acc_b = sum(t["correct"] for t in b.values()) / 30
    assert cmp["accuracy_a"] == pytest.approx(acc_a) and cmp["accuracy_b"] == pytest.approx(acc_b)
    assert cmp["difference"] == pytest.approx(acc_b - acc_a)
    low, high = cmp["ci95"]
    assert low <= cmp["difference"] <= high
    assert 0 < cmp["mcnemar_p"] <= 1
    assert f"verdict changed: {len(expected_changed)}" in result.stdout
    for tid in expected_changed:
        assert tid in result.stdout


def test_compare_run_with_itself_shows_full_agreement(two_runs):
    path_a, _ = two_runs
    result = run_eval("--compare", str(path_a), str(path_a))
    assert result.returncode == 0
    assert "identical responses: 30/30" in result.stdout
    assert "verdict changed: 0" in result.stdout and "+0.0 points" in result.stdout


def test_compare_only_uses_tasks_graded_in_both(simulator, two_runs, tmp_path):
    path_a, _ = two_runs
    sim = simulator()
    path_c = tmp_path / "other-sample.json"
    assert run_eval("--server", sim.url, "--dataset", "gsm8k", "--n-cases", "200", "--sample-seed", "9",
                    "--output", str(path_c), "--threads", "8").returncode == 0
    a, c = load_state(path_a)["tasks"], load_state(path_c)["tasks"]
    common = set(a) & set(c)
    assert 0 < len(common) < 30
    result = run_eval("--compare", str(path_a), str(path_c), "--compare-json", str(tmp_path / "x.json"))
    cmp = json.loads((tmp_path / "x.json").read_text())
    assert cmp["matched"] == len(common) and cmp["only_in_a"] == 30 - len(common)
    assert "graded in only one run" in result.stdout and "sample_seed" in result.stdout


@pytest.mark.parametrize("content", [None, "not json", '{"format": "something else"}'])
def test_compare_unreadable_input_exits_2(two_runs, tmp_path, content):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    result = run_eval("--compare", str(two_runs[0]), str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("llama-eval: error:") and str(bad) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
