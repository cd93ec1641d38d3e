"""Paired comparison of two runs over the same tasks (e.g. TP=1 vs TP=2):
accuracy difference with a clustered 95% interval, McNemar counts, the tasks
whose verdict changed, and how often the response text itself was identical."""

import os
from collections import OrderedDict
from typing import Dict, List

from ..tasks import DONE
from .report_text import percent
from .stats import mcnemar_exact_p, paired_difference

CONFIG_KEYS_THAT_MATTER = ("datasets", "n_cases", "sample_seed", "n_repeats", "grader", "sampling",
                           "system_prompt", "model")


def _common_prefix_length(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))


def _config_differences(a: Dict, b: Dict) -> List[str]:
    config_a, config_b = a.get("config", {}), b.get("config", {})
    return [k for k in CONFIG_KEYS_THAT_MATTER if config_a.get(k) != config_b.get(k)]


def _outcome_key(a_correct: bool, b_correct: bool) -> str:
    if a_correct and b_correct:
        return "both_correct"
    if a_correct:
        return "only_a_correct"
    return "only_b_correct" if b_correct else "both_wrong"


def compare_states(a: Dict, b: Dict) -> Dict:
    done_a = {tid: t for tid, t in a["tasks"].items() if t.get("status") == DONE}
    done_b = {tid: t for tid, t in b["tasks"].items() if t.get("status") == DONE}
    matched = [tid for tid in done_a if tid in done_b]
    counts = {"both_correct": 0, "only_a_correct": 0, "only_b_correct": 0, "both_wrong": 0}
    pairs_by_case: Dict[str, list] = OrderedDict()
    changed, identical, prefix_fractions = [], 0, []
    for tid in matched:
        ta, tb = done_a[tid], done_b[tid]
        ca, cb = bool(ta.get("correct")), bool(tb.get("correct"))
        counts[_outcome_key(ca, cb)] += 1
        pairs_by_case.setdefault(ta["case_id"], []).append((int(ca), int(cb)))
        if ca != cb:
            changed.append({"task": tid, "a_correct": ca, "b_correct": cb, "reference": ta.get("reference"),
                            "a_extracted": ta.get("extracted"), "b_extracted": tb.get("extracted")})
        ra, rb = ta.get("response") or "", tb.get("response") or ""
        identical += ra == rb
        longest = max(len(ra), len(rb))
        prefix_fractions.append(1.0 if longest == 0 else _common_prefix_length(ra, rb) / longest)
    n = len(matched)
    difference = paired_difference(list(pairs_by_case.values()))
    return {
        "matched": n,
        "only_in_a": len(set(done_a) - set(done_b)),
        "only_in_b": len(set(done_b) - set(done_a)),
        "accuracy_a": (counts["both_correct"] + counts["only_a_correct"]) / n if n else None,
        "accuracy_b": (counts["both_correct"] + counts["only_b_correct"]) / n if n else None,
        "difference": difference["difference"] if n else None,
        "ci95": difference["ci95"] if n else None,
        **counts,
        "mcnemar_p": mcnemar_exact_p(counts["only_a_correct"], counts["only_b_correct"]),
        "identical_responses": identical,
        "mean_shared_prefix": sum(prefix_fractions) / n if n else None,
        "changed": changed,
        "config_differences": _config_differences(a, b),
    }


def format_comparison(result: Dict, label_a: str, label_b: str, max_listed: int = 50) -> str:
    n = result["matched"]
    lines = [f"A: {label_a}", f"B: {label_b}", f"matched tasks (graded in both): {n}"]
    if result["only_in_a"] or result["only_in_b"]:
        lines.append(f"graded in only one run: A {result['only_in_a']}, B {result['only_in_b']} (left out)")
    if result["config_differences"]:
        lines.append("note: the runs differ in " + ", ".join(result["config_differences"]))
    if n == 0:
        lines.append("nothing to compare: no task is graded in both runs")
        return "\n".join(lines)
    ci = result["ci95"]
    lines += [
        f"accuracy A {percent(result['accuracy_a'])}, B {percent(result['accuracy_b'])}",
        f"difference B - A: {100 * result['difference']:+.1f} points, "
        f"95% CI [{100 * ci[0]:+.1f}, {100 * ci[1]:+.1f}] (paired, clustered by case)",
        f"both correct {result['both_correct']}, only A correct {result['only_a_correct']}, "
        f"only B correct {result['only_b_correct']}, both wrong {result['both_wrong']}; "
        f"McNemar exact p = {result['mcnemar_p']:.3g}",
        f"identical responses: {result['identical_responses']}/{n} ({percent(result['identical_responses'] / n)}); "
        f"mean shared prefix {percent(result['mean_shared_prefix'])} of the longer response",
        f"verdict changed: {len(result['changed'])}",
    ]
    for change in result["changed"][:max_listed]:
        lines.append(f"  {change['task']}: A {'right' if change['a_correct'] else 'wrong'} "
                     f"({change['a_extracted']!r}) -> B {'right' if change['b_correct'] else 'wrong'} "
                     f"({change['b_extracted']!r}), reference {change['reference']!r}")
    if len(result["changed"]) > max_listed:
        lines.append(f"  ... and {len(result['changed']) - max_listed} more")
    return "\n".join(lines)
