"""Shared test fixtures: paths, free ports, the simulator as a subprocess, and
running llama-eval as a subprocess."""

import csv
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

EVAL_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = EVAL_DIR.parent
EVAL_SCRIPT = EVAL_DIR / "llama-eval.py"
SIMULATOR_SCRIPT = EVAL_DIR / "llama-server-simulator.py"
PYTHON = sys.executable

sys.path.insert(0, str(EVAL_DIR))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_health(url: str, process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with status {process.returncode} before becoming healthy")
        try:
            if requests.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url}/health did not answer 200 within {timeout_s} s")


class SimulatorProcess:
    def __init__(self, *args: str):
        self.process = subprocess.Popen([PYTHON, str(SIMULATOR_SCRIPT), "--port", "0", *args],
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.process.stdout.readline()
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"simulator did not start: {line!r} {self.process.stderr.read()}")
        self.url = line.split("listening on ", 1)[1].strip()
        wait_for_health(self.url, self.process)

    def stats(self) -> dict:
        return requests.get(f"{self.url}/simulator/stats", timeout=5).json()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()


@pytest.fixture
def simulator():
    """Factory: simulator("--success-rate", "0.5") starts one; all are killed at the end."""
    started = []

    def start(*args: str) -> SimulatorProcess:
        sim = SimulatorProcess(*args)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.kill()


def eval_command(*args: str) -> list:
    return [PYTHON, str(EVAL_SCRIPT), "--no-progress", *args]


def run_eval(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(eval_command(*args), capture_output=True, text=True, timeout=timeout)


def start_eval(*args: str) -> subprocess.Popen:
    return subprocess.Popen(eval_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def load_state(path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def done_tasks(state: dict) -> list:
    return [t for t in state["tasks"].values() if t["status"] == "done"]


def wait_until(predicate, timeout_s: float, what: str, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def read_state_if_any(path):
    """The state, or None before the file exists. An invalid file raises: it never may be."""
    try:
        return load_state(path)
    except FileNotFoundError:
        return None


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch):
    # Tests only talk to 127.0.0.1; an inherited proxy setting must not interfere.
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


def write_gpqa_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
                                                    "Incorrect Answer 2", "Incorrect Answer 3", "Subdomain"])
        writer.writeheader()
        writer.writerows(rows)


def gpqa_rows(n):
    # Invented questions in the official column layout (the real data is not shipped).
    return [{"Record ID": f"rec{i}", "Question": f"Which value does synthetic property {i} take?",
             "Correct Answer": f" right {i}\n(multi-line) ", "Incorrect Answer 1": f"wrong a{i}",
             "Incorrect Answer 2": f"wrong b{i}", "Incorrect Answer 3": f"wrong c{i}", "Subdomain": "Testing"}
            for i in range(n)]
