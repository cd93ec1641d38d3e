"""--sleep-idle-seconds as llama-server's: after that long without a
request the model and its caches are freed (/props says is_sleeping, the
process's memory falls), /health, /props and /metrics leave it asleep, and
the next request loads it again and answers as before."""

import subprocess
import time
from pathlib import Path

import pytest

from server_harness import ServerProcess, generated_model, model_path, server_bin
from mpi_server import MpiServer

BODY = {"prompt": "Once upon a time there was a little", "n_predict": 16, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("sleep") / "f32.gguf", weight_type="f32")  # 72 MB of weights


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def wait_asleep(s, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if s.get("/props").json()["is_sleeping"]:
            return
        time.sleep(0.1)
    pytest.fail(f"not asleep after {timeout} s:\n{s.log_text()}")


@pytest.mark.parametrize("tp", [1, 2])
def test_the_model_sleeps_when_idle_and_wakes_for_the_next_request(model, tp):
    s = ServerProcess("-np", "2", "-c", "512", "-t", "2", "--tp", str(tp), "--metrics", "--sleep-idle-seconds", "1",
                      model=model)
    try:
        first = s.post("/completion", BODY).json()
        assert not s.get("/props").json()["is_sleeping"]
        awake = rss_mib(s.proc.pid)
        wait_asleep(s)
        assert "sleeping after 1 s without requests" in s.log_text()
        asleep = rss_mib(s.proc.pid)
        assert asleep < awake - 40, (awake, asleep)
        # These do not wake it.
        assert s.get("/health").json() == {"status": "ok"}
        assert "llamacpp:prompt_tokens_total" in s.get("/metrics").text
        assert s.post("/tokenize", {"content": "hello"}).status_code == 200
        assert s.get("/props").json()["is_sleeping"]
        # A request does, and gets the same answer; the slot's cache is gone.
        again = s.post("/completion", BODY).json()
        assert again["content"] == first["content"]
        assert again["tokens_cached"] == 0 and again["timings"]["cache_n"] == 0
        assert "awake: the model is loaded again" in s.log_text()
        assert not s.get("/props").json()["is_sleeping"]
        # And it sleeps again.
        wait_asleep(s)
    finally:
        assert s.stop() == 0


def test_a_sleeping_server_stops_cleanly():
    s = ServerProcess("-t", "1", "--sleep-idle-seconds", "1")
    wait_asleep(s)
    assert s.stop() == 0


def test_zero_seconds_is_refused_as_upstream_refuses_it():
    r = subprocess.run([str(server_bin()), "-m", str(model_path()), "--port", "0", "--sleep-idle-seconds", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--sleep-idle-seconds" in r.stderr, r.stderr


def test_a_group_of_processes_stays_awake(model):
    group = MpiServer("-np", "1", "-c", "256", "-t", "1", "--sleep-idle-seconds", "1", model=model)
    try:
        assert "--sleep-idle-seconds has no effect under mpirun" in group.log_text()
        time.sleep(1.5)
        assert not group.get("/props").json()["is_sleeping"]
        assert group.post("/completion", BODY).status_code == 200
    finally:
        assert group.stop() == 0, group.log_text()
