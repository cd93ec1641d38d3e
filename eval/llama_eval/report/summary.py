"""Accuracy summaries of a set of task records: overall, per dataset, per
server, and per server and dataset."""

from collections import OrderedDict, defaultdict
from typing import Dict, Iterable, List

from ..tasks import DONE, ERROR, PENDING
from .stats import clustered_accuracy, mean_pass_at_k, pass_at_k_levels


def _clusters(done_tasks: List[Dict]) -> List[List[int]]:
    by_case = OrderedDict()
    for task in done_tasks:
        by_case.setdefault(task["case_id"], []).append(1 if task.get("correct") else 0)
    return list(by_case.values())


def _mean(values: List[float]):
    return sum(values) / len(values) if values else None


def group_summary(tasks: List[Dict]) -> Dict:
    done = [t for t in tasks if t.get("status") == DONE]
    clusters = _clusters(done)
    estimate = clustered_accuracy(clusters)
    max_repeats = max((len(c) for c in clusters), default=0)
    completion_tokens = [t["usage"].get("completion_tokens") for t in done
                         if isinstance(t.get("usage"), dict) and isinstance(t["usage"].get("completion_tokens"), int)]
    summary = {
        "n": len(done),
        "correct": sum(1 for t in done if t.get("correct")),
        "accuracy": estimate["accuracy"] if done else None,
        "ci95": estimate["ci95"] if done else None,
        "cases": len(clusters),
        "errors": sum(1 for t in tasks if t.get("status") == ERROR),
        "pending": sum(1 for t in tasks if t.get("status", PENDING) == PENDING),
        "mean_latency_s": _mean([t["latency_s"] for t in done if isinstance(t.get("latency_s"), (int, float))]),
        "completion_tokens": sum(completion_tokens) if completion_tokens else None,
    }
    if max_repeats > 1:
        summary["pass_at_k"] = {str(k): mean_pass_at_k(clusters, k) for k in pass_at_k_levels(max_repeats)}
    return summary


def _grouped(tasks: Iterable[Dict], key) -> Dict[str, List[Dict]]:
    groups = defaultdict(list)
    for task in tasks:
        value = key(task)
        if value is not None:
            groups[value].append(task)
    return dict(sorted(groups.items()))


def summarise(tasks: List[Dict]) -> Dict:
    # Per-server groups only hold tasks a server answered (or failed); pending ones have no server.
    by_server = _grouped(tasks, lambda t: t.get("server"))
    return {
        "summary": group_summary(tasks),
        "by_dataset": {name: group_summary(group) for name, group in _grouped(tasks, lambda t: t["dataset"]).items()},
        "by_server": {name: group_summary(group) for name, group in by_server.items()},
        "by_server_dataset": {
            server: {name: group_summary(g) for name, g in _grouped(group, lambda t: t["dataset"]).items()}
            for server, group in by_server.items()
        },
    }
