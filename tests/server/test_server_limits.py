"""Request limits: --max-body-size (413) and --max-queue (503), both as OpenAI
error objects."""

import json
import time

import pytest
import requests

from server_harness import ServerProcess, assert_error


@pytest.fixture(scope="module")
def limited():
    # One slot, nobody may wait, 4 KiB bodies.
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "1", "--max-queue", "0", "--max-body-size", "4096")
    yield s
    assert s.stop() == 0, s.log_text()


def test_body_over_limit_is_413(limited):
    r = limited.post("/v1/completions", {"prompt": "a" * 5000, "max_tokens": 1})
    err = assert_error(r, 413, code="payload_too_large")
    assert err["type"] == "invalid_request_error"


def test_body_under_limit_is_served(limited):
    r = limited.post("/v1/completions", {"prompt": "a" * 1000, "max_tokens": 1})
    assert r.status_code == 200, r.text


def test_full_queue_is_503(limited):
    # Occupy the only slot with a long stream, then ask again.
    busy = requests.post(limited.base + "/v1/completions", stream=True, timeout=60,
                         json={"prompt": "Once", "max_tokens": 1900, "ignore_eos": True, "stream": True})
    try:
        lines = busy.iter_lines()
        first = next(line for line in lines if line.startswith(b"data: "))
        assert "choices" in json.loads(first[6:])
        r = limited.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        err = assert_error(r, 503, code="server_overloaded")
        assert "busy" in err["message"]
    finally:
        busy.close()
    # Once the slot is free again, requests are served.
    for _ in range(100):
        r = limited.post("/v1/completions", {"prompt": "Once", "max_tokens": 1})
        if r.status_code == 200:
            break
        time.sleep(0.05)
    assert r.status_code == 200, r.text


def test_queue_limit_flags_are_checked():
    import subprocess
    from server_harness import model_path, server_bin
    for flag, value in (("--max-queue", "-1"), ("--max-body-size", "0"), ("--max-queue", "x")):
        p = subprocess.run([str(server_bin()), "-m", str(model_path()), flag, value], capture_output=True, text=True,
                           timeout=30)
        assert p.returncode == 2, (flag, value, p.stderr)
        assert flag in p.stderr
