"""tools/load-bench.py against the real server: the bench and soak modes run,
count what they sent, and report the fields docs/benchmarks.md quotes."""

import json
import subprocess
import sys

from server_harness import REPO, ServerProcess

TOOL = REPO / "tools" / "load-bench.py"


def run_tool(*args):
    p = subprocess.run([sys.executable, str(TOOL), *args, "--json"], capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_bench_mode_reports_every_level(server):
    rc, out, err = run_tool("--server", server.base, "--name", "ours", "--concurrency", "1,2", "--requests", "3",
                            "--max-tokens", "4", "--prompt-tokens", "16", "--warmup", "1", "--salt", "7")
    assert rc == 0, err
    d = json.loads(out)
    assert d["config"]["salt"] == 7
    levels = {(r["concurrency"], r["server"]): r for r in d["summary"]}
    assert set(levels) == {(1, "ours"), (2, "ours")}
    for r in levels.values():
        assert r["ok"] == 3 and r["failures"] == 0
        assert r["tok_per_s"] > 0 and r["ttft_p50_ms"] > 0


def test_soak_mode_reads_memory_and_passes():
    # A prompt cache of 1 MiB fills within the first seconds, then holds:
    # memory that keeps growing after that is a leak.
    s = ServerProcess("-np", "2", "-c", "1024", "-t", "1", "--cache-ram", "1")
    try:
        rc, out, err = run_tool("--server", s.base, "--name", "ours", "--soak", "3", "--clients", "3",
                                "--max-tokens", "4", "--prompt-tokens", "16", "--pid", str(s.proc.pid),
                                "--max-rss-growth", "50")
        d = json.loads(out)
        assert d["failures"] == 0 and d["requests"] > 0, d
        assert d["rss_start_kib"] > 0 and d["rss_end_kib"] > 0
        assert d["idle_after"] is True and d["health_after"] == 200
        assert rc == 0 and d["passed"], err
    finally:
        assert s.stop() == 0, s.log_text()
