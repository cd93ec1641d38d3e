"""A self-contained HTML report: configuration, summary tables, an accuracy
bar chart with 95% error bars (PNG embedded as base64), and the wrong answers."""

import base64
import html
import io
from typing import Dict, List

from .report_text import ALL, interval, percent

MAX_LISTED_FAILURES = 200


def _chart_png(state: Dict) -> bytes:
    import matplotlib
    matplotlib.use("Agg")  # no display on servers
    import matplotlib.pyplot as plt

    per_server = state.get("by_server_dataset", {})
    datasets = sorted({d for groups in per_server.values() for d in groups}) or [ALL]
    servers = sorted(per_server) or [ALL]
    width = 0.8 / len(servers)
    figure, axes = plt.subplots(figsize=(max(5.0, 1.6 * len(datasets) * max(1, len(servers) / 2)), 3.8))
    for i, server in enumerate(servers):
        xs, ys, low, high = [], [], [], []
        for j, dataset in enumerate(datasets):
            s = per_server.get(server, {}).get(dataset)
            if not s or s.get("accuracy") is None:
                continue
            xs.append(j + (i - (len(servers) - 1) / 2) * width)
            ys.append(100 * s["accuracy"])
            low.append(100 * (s["accuracy"] - s["ci95"][0]))
            high.append(100 * (s["ci95"][1] - s["accuracy"]))
        axes.bar(xs, ys, width, yerr=[low, high], capsize=4, label=server)
    axes.set_xticks(range(len(datasets)))
    axes.set_xticklabels(datasets)
    axes.set_ylim(0, 105)
    axes.set_ylabel("accuracy (%)")
    axes.set_title("Accuracy with 95% confidence intervals")
    if len(servers) > 1:
        axes.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def _table(header: List[str], rows: List[List[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _summary_rows(state: Dict) -> List[List[str]]:
    rows = []
    for server, groups in state.get("by_server_dataset", {}).items():
        for dataset, s in groups.items():
            rows.append([server, dataset, s["n"], s["correct"], percent(s["accuracy"]), interval(s["ci95"]),
                         s["errors"]])
    s = state["summary"]
    rows.append([ALL, ALL, s["n"], s["correct"], percent(s["accuracy"]), interval(s["ci95"]), s["errors"]])
    return rows


def _failure_rows(state: Dict) -> List[List[str]]:
    rows = []
    for task in state["tasks"].values():
        if task.get("status") == "done" and task.get("correct"):
            continue
        rows.append([task["id"], task.get("server") or "-", task["reference"], task.get("extracted") or "-",
                     task.get("error") or ("wrong" if task.get("status") == "done" else task.get("status"))])
    return rows


def render_html(state: Dict) -> str:
    chart = base64.b64encode(_chart_png(state)).decode("ascii")
    config = state["config"]
    config_rows = [[key, value] for key, value in (
        ("datasets", ", ".join(d["name"] for d in config["datasets"])),
        ("cases per dataset", config.get("n_cases") or "all"),
        ("repeats", config.get("n_repeats")),
        ("grader", config["grader"].get("type") or "per dataset"),
        ("sampling", ", ".join(f"{k}={v}" for k, v in config["sampling"].items() if v is not None)),
        ("servers", ", ".join(f"{s['name']} ({s['url']})" for s in config["servers"])),
        ("created", state.get("created")), ("updated", state.get("updated")))]
    failures = _failure_rows(state)
    summary = state["summary"]
    pass_at_k = ""
    if summary.get("pass_at_k"):
        pass_at_k = "<p>" + ", ".join(f"pass@{k}: {percent(v)}" for k, v in summary["pass_at_k"].items()) + "</p>"
    shown = failures[:MAX_LISTED_FAILURES]
    more = f"<p>... and {len(failures) - len(shown)} more</p>" if len(failures) > len(shown) else ""
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>llama-eval report</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse;margin:1em 0}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:90%}}th{{background:#eee}}</style>
</head><body>
<h1>llama-eval report</h1>
<h2>Configuration</h2>{_table(["setting", "value"], config_rows)}
<h2>Accuracy</h2>
<img alt="accuracy per dataset and server" src="data:image/png;base64,{chart}">
{_table(["server", "dataset", "n", "correct", "accuracy", "95% CI", "errors"], _summary_rows(state))}
{pass_at_k}
<h2>Wrong or failed tasks ({len(failures)})</h2>
{_table(["task", "server", "reference", "extracted", "outcome"], shown)}{more}
</body></html>
"""
