"""Fixtures for the llama-tp-server tests (see server_harness.py)."""

import pytest

from server_harness import ServerProcess


@pytest.fixture(scope="session")
def server():
    """The shared server: 4 slots, 2048 context (512 per slot), 1 thread, /metrics on."""
    s = ServerProcess("-np", "4", "-c", "2048", "-t", "1", "--alias", "stories", "--metrics")
    yield s
    rc = s.stop()
    assert rc == 0, f"server exited with {rc} after SIGTERM:\n{s.log_text()}"
