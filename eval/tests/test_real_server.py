"""llama-eval against the real llama-tp-server with the bundled tiny model.

The model (stories260K) cannot do arithmetic, so the score is meaningless;
what is checked is that a real server and llama-eval work together end to
end. CI always builds the server, so a missing binary is a failure, not a skip.
LLAMA_TP_SERVER_BIN overrides the binary, LLAMA_TP_TEST_MODEL the model.
"""

import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO_ROOT, free_port, load_state, run_eval, wait_for_health

SERVER_BIN = Path(os.environ.get("LLAMA_TP_SERVER_BIN", REPO_ROOT / "build" / "bin" / "llama-tp-server"))
MODEL = Path(os.environ.get("LLAMA_TP_TEST_MODEL", REPO_ROOT / "models" / "stories260K.gguf"))
N_CASES = 3
MAX_TOKENS = 16


@contextmanager
def running_server(log_path: Path):
    port = free_port()
    with open(log_path, "w") as log:
        process = subprocess.Popen([str(SERVER_BIN), "-m", str(MODEL), "--host", "127.0.0.1", "--port", str(port)],
                                   stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_for_health(url, process, timeout_s=120)
        except RuntimeError as err:
            pytest.fail(f"{err}; server log:\n{log_path.read_text()[-3000:]}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def test_small_gsm8k_run_against_real_server(tmp_path):
    if not (SERVER_BIN.is_file() and os.access(SERVER_BIN, os.X_OK)):
        pytest.fail(f"llama-tp-server not found at {SERVER_BIN}: build the project first "
                    f"(cmake -B build && cmake --build build) or set LLAMA_TP_SERVER_BIN")
    if not MODEL.is_file():
        pytest.fail(f"test model not found at {MODEL}")
    log_path = tmp_path / "server.log"
    out = tmp_path / "real.json"
    with running_server(log_path) as url:
        result = run_eval("--server", url, "--dataset", "gsm8k", "--n-cases", str(N_CASES), "--threads", "1",
                          "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--timeout", "120",
                          "--retries", "1", "--output", str(out), timeout=600)
    context = f"\nstderr:\n{result.stderr[-3000:]}\nserver log:\n{log_path.read_text()[-3000:]}"
    assert result.returncode == 0, context
    state = load_state(out)
    tasks = list(state["tasks"].values())
    assert len(tasks) == N_CASES, context
    for task in tasks:
        assert task["status"] == "done", (task.get("error"), context)
        assert isinstance(task["response"], str)
        assert task["latency_s"] > 0
        usage = task.get("usage")
        if usage and isinstance(usage.get("completion_tokens"), int):
            assert 0 <= usage["completion_tokens"] <= MAX_TOKENS
    assert any(task["response"].strip() for task in tasks), "the model produced no text at all" + context
    assert state["summary"]["n"] == N_CASES
