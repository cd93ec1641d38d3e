"""Statistics for accuracy estimates: confidence intervals that respect
repeated attempts of one case, the unbiased pass@k estimator, and paired tests."""

import math
from typing import Dict, List, Optional, Sequence, Tuple

Z95 = 1.959963984540054


def wilson_interval(p: float, n: float, z: float = Z95) -> Tuple[float, float]:
    """Wilson score interval; stays inside [0, 1] and behaves at p = 0 or 1."""
    if n <= 0:
        return (0.0, 1.0)
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def clustered_accuracy(clusters: Sequence[Sequence[int]]) -> Dict[str, float]:
    """Accuracy over all attempts, and a 95% interval that treats the attempts of
    one case as correlated.

    The variance of the pooled proportion is the cluster-robust (ratio
    estimator) variance over cases; it gives an effective sample size
    n_eff = p(1-p)/Var, and the interval is Wilson's with n_eff. With one
    attempt per case this is (almost) the plain Wilson interval; with repeats
    that always agree it shrinks n_eff to the number of cases.
    """
    clusters = [list(c) for c in clusters if len(c) > 0]
    n_obs = sum(len(c) for c in clusters)
    n_cases = len(clusters)
    if n_obs == 0:
        return {"accuracy": 0.0, "ci95": [0.0, 1.0], "n_eff": 0.0}
    p = sum(sum(c) for c in clusters) / n_obs
    if n_cases > 1:
        residual = sum((sum(c) - p * len(c)) ** 2 for c in clusters)
        variance = n_cases / (n_cases - 1) * residual / (n_obs ** 2)
    else:
        variance = 0.0
    if variance > 0:
        n_eff = min(float(n_obs), p * (1 - p) / variance)
    else:
        # No spread between cases: all right, all wrong, or identical means.
        n_eff = float(n_cases) if p in (0.0, 1.0) else float(n_obs)
    low, high = wilson_interval(p, n_eff)
    return {"accuracy": p, "ci95": [low, high], "n_eff": n_eff}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one case: n attempts, c correct (Chen et al. 2021)."""
    if k > n:
        raise ValueError("k must not exceed the number of attempts")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def mean_pass_at_k(clusters: Sequence[Sequence[int]], k: int) -> Optional[float]:
    """Mean pass@k over the cases that have at least k graded attempts."""
    values = [pass_at_k(len(c), sum(c), k) for c in clusters if len(c) >= k]
    return sum(values) / len(values) if values else None


def pass_at_k_levels(max_k: int) -> List[int]:
    """k values worth reporting: 1, 2, 4, ... and max_k itself."""
    levels, k = [], 1
    while k < max_k:
        levels.append(k)
        k *= 2
    levels.append(max_k)
    return sorted(set(levels))


def _continued_fraction_beta(a: float, b: float, x: float) -> float:
    # Modified Lentz evaluation of the continued fraction of the incomplete beta function.
    tiny, eps = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= c * d
        if abs(c * d - 1.0) < eps:
            break
    return result


def regularized_beta(a: float, b: float, x: float) -> float:
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction_beta(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction_beta(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(probability: float, df: float) -> float:
    """Inverse of the Student t CDF by bisection (monotone, so always converges)."""
    low, high = -1e3, 1e3
    for _ in range(200):
        mid = (low + high) / 2
        if t_cdf(mid, df) < probability:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def mcnemar_exact_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value from the discordant pair counts."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def paired_difference(pairs_by_case: Sequence[Sequence[Tuple[int, int]]]) -> Dict[str, object]:
    """Accuracy difference B - A over matched attempts, with a 95% t interval that
    clusters by case. pairs_by_case holds, per case, (a_correct, b_correct) pairs."""
    cases = [list(p) for p in pairs_by_case if p]
    n_obs = sum(len(p) for p in cases)
    if n_obs == 0:
        return {"difference": 0.0, "ci95": [0.0, 0.0]}
    sums = [sum(b - a for a, b in p) for p in cases]
    difference = sum(sums) / n_obs
    n_cases = len(cases)
    if n_cases < 2:
        return {"difference": difference, "ci95": [difference, difference]}
    residual = sum((s - difference * len(p)) ** 2 for s, p in zip(sums, cases))
    standard_error = math.sqrt(n_cases / (n_cases - 1) * residual) / n_obs
    half = t_quantile(0.975, n_cases - 1) * standard_error
    return {"difference": difference, "ci95": [difference - half, difference + half]}
