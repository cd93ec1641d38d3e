"""llama-tp-server under mpirun for the tests: the launch line, the processes
mpirun started, and a ServerProcess that stops the group as an operator
would (SIGTERM to process 0)."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import requests

from server_harness import ServerProcess

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
GROUP_GONE_S = 10


def require_mpirun():
    if shutil.which("mpirun") is None:
        pytest.fail("mpirun not found: install openmpi-bin (tools/setup.sh does)", pytrace=False)


def launched_ranks(mpirun_pid):
    """{rank: pid} of the processes mpirun started on this machine."""
    ranks = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            env = (entry / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        for var in env:
            if var.startswith(b"OMPI_COMM_WORLD_RANK="):
                ranks[int(var.split(b"=", 1)[1])] = int(entry.name)
    return ranks


def alive(pid):
    """Running or stopped, not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class MpiServer(ServerProcess):
    def __init__(self, *extra_args, n=2, model=None, **kw):
        require_mpirun()
        super().__init__(*extra_args, model=model, launcher=[*MPIRUN, "-n", str(n)], **kw)
        self.ranks = launched_ranks(self.proc.pid)
        assert sorted(self.ranks) == list(range(n)), (self.ranks, self.log_text())

    def stop(self, timeout=15):
        # SIGTERM to process 0: it ends the followers and mpirun exits 0.
        if self.proc.poll() is None and alive(self.ranks[0]):
            os.kill(self.ranks[0], signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass  # the harness's stop signals mpirun and reports it
        return super().stop(timeout)

    def health_while_running(self, since):
        """/health's statuses, asked every 0.1 s until mpirun exits (at most GROUP_GONE_S)."""
        statuses = []
        while self.proc.poll() is None and time.time() - since < GROUP_GONE_S:
            try:
                statuses.append(requests.get(self.base + "/health", timeout=1).status_code)
            except requests.RequestException:
                pass
            time.sleep(0.1)
        return statuses

    def wait_group_gone(self, since):
        deadline = since + GROUP_GONE_S
        while time.time() < deadline:
            if self.proc.poll() is not None and not any(alive(p) for p in self.ranks.values()):
                return time.time() - since
            time.sleep(0.05)
        left = [p for p in self.ranks.values() if alive(p)]
        for p in left:
            os.kill(p, signal.SIGKILL)
        self.proc.kill()
        pytest.fail(f"group still running {GROUP_GONE_S} s after the fault (left: {left}):\n{self.log_text()}",
                    pytrace=False)
