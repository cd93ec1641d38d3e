"""eval/tp-accuracy.sh, driven with stand-in binaries: a fake llama-tp-server
that runs the simulator, and a fake llama-tp-compare that prints JSON."""

import json
import os
import subprocess
import time

from conftest import EVAL_DIR, PYTHON, SIMULATOR_SCRIPT

SCRIPT = EVAL_DIR / "tp-accuracy.sh"

FAKE_SERVER = """#!{python}
# Stand-in for llama-tp-server: records its arguments, then becomes the simulator.
import json, os, sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
with open(os.path.join({record_dir!r}, "server-tp%s.json" % value("--tp")), "w") as handle:
    json.dump({{"args": args, "pid": os.getpid()}}, handle)
if os.environ.get("FAKE_SERVER_FAIL_TP") == value("--tp"):
    sys.exit("fake server: simulated start-up failure")
os.execv({python!r}, [{python!r}, {simulator!r}, "--host", value("--host"), "--port", value("--port"),
         "--dataset", "gsm8k", "--success-rate", "0.5", "--seed", "3"])
"""

FAKE_COMPARE = """#!/bin/sh
# Stand-in for llama-tp-compare.
echo "$@" > {record_dir}/compare-args.txt
echo '{{"mean_kl": 0.00012, "max_kl": 0.004, "top1_agreement": 1.0}}'
"""


def make_fakes(tmp_path):
    record_dir = tmp_path / "records"
    record_dir.mkdir()
    server = tmp_path / "fake-server"
    server.write_text(FAKE_SERVER.format(python=PYTHON, record_dir=str(record_dir), simulator=str(SIMULATOR_SCRIPT)))
    compare = tmp_path / "fake-compare"
    compare.write_text(FAKE_COMPARE.format(record_dir=str(record_dir)))
    for path in (server, compare):
        path.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    env = dict(os.environ, LLAMA_TP_SERVER_BIN=str(server), LLAMA_TP_COMPARE_BIN=str(compare), PYTHON=PYTHON)
    return record_dir, model, env


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_tp_accuracy_report_end_to_end(tmp_path):
    record_dir, model, env = make_fakes(tmp_path)
    out = tmp_path / "report"
    result = subprocess.run(["bash", str(SCRIPT), "-m", str(model), "--tp", "2", "--n-cases", "6",
                             "--min-identical", "100", "--out", str(out)],
                            capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "identical responses: 6/6" in result.stdout
    assert '"mean_kl": 0.00012' in result.stdout and "OK: 100.0% identical" in result.stdout
    for tp in ("1", "2"):
        record = json.loads((record_dir / f"server-tp{tp}.json").read_text())
        assert record["args"][:4] == ["-m", str(model), "--tp", tp]
        assert "--host" in record["args"] and "127.0.0.1" in record["args"]
    assert (record_dir / "compare-args.txt").read_text().split() == [
        "-m", str(model), "--tp", "2", "--reference", "tp1", "--json"]
    state = json.loads((out / "tp2.json").read_text())
    assert state["config"]["sampling"]["temperature"] == 0 and state["summary"]["n"] == 6
    # Both servers were stopped by the script.
    time.sleep(0.2)
    for tp in ("1", "2"):
        assert not process_alive(json.loads((record_dir / f"server-tp{tp}.json").read_text())["pid"])


def test_tp_accuracy_judges_the_split_it_served(tmp_path):
    record_dir, model, env = make_fakes(tmp_path)
    result = subprocess.run(["bash", str(SCRIPT), "-m", str(model), "--tp", "2", "--n-cases", "2",
                             "--out", str(tmp_path / "o"), "--", "-ts", "3,1", "-c", "512", "--split-invariant"],
                            capture_output=True, text=True, env=env, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    args = json.loads((record_dir / "server-tp2.json").read_text())["args"]
    assert args[-5:] == ["-ts", "3,1", "-c", "512", "--split-invariant"]
    args = json.loads((record_dir / "server-tp1.json").read_text())["args"]
    assert args[-3:] == ["-c", "512", "--split-invariant"] and "-ts" not in args
    assert (record_dir / "compare-args.txt").read_text().split() == [
        "-m", str(model), "--tp", "2", "--reference", "tp1", "-ts", "3,1", "--split-invariant", "--json"]


def test_tp_accuracy_fails_clearly_without_binaries(tmp_path):
    _, model, env = make_fakes(tmp_path)
    env["LLAMA_TP_SERVER_BIN"] = str(tmp_path / "missing-server")
    result = subprocess.run(["bash", str(SCRIPT), "-m", str(model)], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 2
    assert "missing-server not found" in result.stderr


def test_tp_accuracy_stops_servers_when_a_server_fails_to_start(tmp_path):
    record_dir, model, env = make_fakes(tmp_path)
    env["FAKE_SERVER_FAIL_TP"] = "2"
    result = subprocess.run(["bash", str(SCRIPT), "-m", str(model), "--out", str(tmp_path / "o")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode != 0
    assert "server exited before it was healthy" in result.stderr
    assert "simulated start-up failure" in (tmp_path / "o" / "server-tp2.log").read_text()
    time.sleep(0.2)
    assert not process_alive(json.loads((record_dir / "server-tp1.json").read_text())["pid"])
