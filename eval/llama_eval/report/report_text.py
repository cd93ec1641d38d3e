"""The summary table printed at the end of a run."""

from typing import Dict, List, Optional

ALL = "(all)"


def percent(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def interval(ci) -> str:
    return "-" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def _row(server: str, dataset: str, s: Dict) -> List[str]:
    latency = s.get("mean_latency_s")
    return [server, dataset, str(s["n"]), str(s["correct"]), percent(s["accuracy"]), interval(s["ci95"]),
            str(s["errors"]), "-" if latency is None else f"{latency:.2f}s"]


def format_table(rows: List[List[str]], header: List[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def summary_table(state: Dict) -> str:
    header = ["server", "dataset", "n", "correct", "accuracy", "95% CI", "errors", "latency"]
    rows = []
    several_servers = len(state.get("by_server", {})) > 1
    for server, datasets in state.get("by_server_dataset", {}).items():
        for dataset, s in datasets.items():
            rows.append(_row(server, dataset, s))
        if len(datasets) > 1 and several_servers:
            rows.append(_row(server, ALL, state["by_server"][server]))
    if several_servers:
        for dataset, s in state.get("by_dataset", {}).items():
            rows.append(_row(ALL, dataset, s))
    rows.append(_row(ALL, ALL, state["summary"]))
    text = format_table(rows, header)
    overall = state["summary"]
    notes = []
    if overall.get("pass_at_k"):
        notes.append("pass@k: " + ", ".join(f"pass@{k} {percent(v)}" for k, v in overall["pass_at_k"].items()))
    if overall.get("pending"):
        notes.append(f"{overall['pending']} task(s) not run yet")
    if overall.get("errors"):
        notes.append(f"{overall['errors']} task(s) failed (see 'error' in the state file)")
    return text + ("\n" + "\n".join(notes) if notes else "")
