"""Confidence intervals, pass@k and paired statistics."""

import math
import random

import pytest

from llama_eval.report.stats import (clustered_accuracy, mcnemar_exact_p, pass_at_k, pass_at_k_levels, paired_difference,
                              t_quantile, wilson_interval)
from llama_eval.report.summary import group_summary


@pytest.mark.parametrize("df,expected", [(1, 12.7062), (2, 4.3027), (10, 2.2281), (30, 2.0423), (1000, 1.9623)])
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_wilson_interval_known_value_and_bounds():
    low, high = wilson_interval(0.5, 100)
    assert low == pytest.approx(0.4038, abs=1e-3) and high == pytest.approx(0.5962, abs=1e-3)
    low, high = wilson_interval(1.0, 10)
    assert high == pytest.approx(1.0) and 0.6 < low < 0.75  # not a degenerate [1, 1]


def test_clustered_interval_equals_wilson_without_repeats_approximately():
    clusters = [[1]] * 70 + [[0]] * 30
    estimate = clustered_accuracy(clusters)
    low, high = wilson_interval(0.7, 100)
    assert estimate["accuracy"] == pytest.approx(0.7)
    assert estimate["ci95"][0] == pytest.approx(low, abs=0.005)
    assert estimate["ci95"][1] == pytest.approx(high, abs=0.005)


def test_perfectly_correlated_repeats_do_not_narrow_the_interval():
    single = clustered_accuracy([[1]] * 30 + [[0]] * 20)
    repeated = clustered_accuracy([[1] * 8] * 30 + [[0] * 8] * 20)
    assert repeated["accuracy"] == pytest.approx(single["accuracy"])
    # 8 identical repeats carry no more information than one attempt.
    assert repeated["ci95"][0] == pytest.approx(single["ci95"][0], abs=0.01)
    assert repeated["ci95"][1] == pytest.approx(single["ci95"][1], abs=0.01)
    assert repeated["n_eff"] == pytest.approx(50, rel=0.05)


def test_independent_repeats_do_narrow_the_interval():
    rng = random.Random(1)
    clusters = [[int(rng.random() < 0.6) for _ in range(8)] for _ in range(50)]
    single = clustered_accuracy([[c[0]] for c in clusters])
    repeated = clustered_accuracy(clusters)
    assert repeated["ci95"][1] - repeated["ci95"][0] < 0.6 * (single["ci95"][1] - single["ci95"][0])


def test_clustered_interval_covers_truth_at_nominal_rate():
    # Cases drawn from a population of varying difficulty (mean 0.5), 4 repeats each:
    # the interval for the population accuracy should cover it about 95% of the time.
    rng = random.Random(7)
    trials, covered, naive_covered = 400, 0, 0
    for _ in range(trials):
        difficulties = [rng.betavariate(0.5, 0.5) for _ in range(60)]  # many easy and many hard cases
        clusters = [[int(rng.random() < d) for _ in range(4)] for d in difficulties]
        low, high = clustered_accuracy(clusters)["ci95"]
        covered += low <= 0.5 <= high
        # Treating the 240 attempts as independent is too narrow and undercovers.
        naive_low, naive_high = wilson_interval(sum(map(sum, clusters)) / 240, 240)
        naive_covered += naive_low <= 0.5 <= naive_high
    assert 0.91 <= covered / trials <= 0.985
    assert naive_covered / trials < covered / trials - 0.05


@pytest.mark.parametrize("n,c,k,expected", [
    (10, 0, 1, 0.0), (10, 10, 5, 1.0), (10, 3, 1, 0.3), (5, 2, 2, 0.7), (4, 1, 4, 1.0), (4, 1, 3, 0.75)])
def test_pass_at_k_unbiased_estimator(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_matches_brute_force_over_subsets():
    import itertools
    outcomes = [1, 0, 0, 1, 0, 0]
    subsets = list(itertools.combinations(outcomes, 3))
    brute = sum(1 for s in subsets if any(s)) / len(subsets)
    assert pass_at_k(6, 2, 3) == pytest.approx(brute)


def test_pass_at_k_levels():
    assert pass_at_k_levels(1) == [1]
    assert pass_at_k_levels(8) == [1, 2, 4, 8]
    assert pass_at_k_levels(6) == [1, 2, 4, 6]


def test_group_summary_reports_pass_at_k_with_repeats():
    tasks = []
    for case, outcomes in (("a", [1, 0, 0, 0]), ("b", [0, 0, 0, 0]), ("c", [1, 1, 1, 1])):
        tasks += [{"case_id": case, "dataset": "d", "status": "done", "correct": bool(o)} for o in outcomes]
    summary = group_summary(tasks)
    assert summary["n"] == 12 and summary["correct"] == 5 and summary["cases"] == 3
    assert summary["pass_at_k"]["1"] == pytest.approx(5 / 12)
    assert summary["pass_at_k"]["4"] == pytest.approx(2 / 3)


def test_mcnemar_exact_p():
    assert mcnemar_exact_p(0, 0) == 1.0
    assert mcnemar_exact_p(5, 5) == 1.0
    assert mcnemar_exact_p(0, 10) == pytest.approx(2 / 1024)
    assert mcnemar_exact_p(1, 9) == pytest.approx(2 * 11 / 1024)


def test_paired_difference_sign_and_interval():
    same = paired_difference([[(1, 1)], [(0, 0)], [(1, 1)]])
    assert same["difference"] == 0 and same["ci95"] == [0, 0]
    better = paired_difference([[(0, 1)]] * 10 + [[(1, 1)]] * 10)
    assert better["difference"] == pytest.approx(0.5)
    assert better["ci95"][0] > 0.2 and better["ci95"][1] < 0.8
    mixed = paired_difference([[(0, 1)]] * 5 + [[(1, 0)]] * 5 + [[(1, 1)]] * 10)
    assert mixed["difference"] == 0 and mixed["ci95"][0] < 0 < mixed["ci95"][1]
    assert math.isclose(mixed["ci95"][0], -mixed["ci95"][1])
