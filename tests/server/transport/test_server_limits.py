"""Request limits: --max-body-size (413), --max-queue (503) and more messages
or tools than a slot's context holds (400), all as OpenAI error objects."""

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


def test_kept_alive_connections_make_way_for_waiting_ones():
    """With every HTTP thread held by a busy kept-alive connection, a new
    connection is still served promptly: while connections wait for a thread,
    responses say "Connection: close" and free theirs."""
    import http.client
    import socket
    import threading
    import urllib.parse

    # One HTTP thread at first, four at most: four busy clients fill them.
    s = ServerProcess("-np", "1", "-c", "512", "-t", "1", "--threads-http", "1")
    url = urllib.parse.urlparse(s.base)
    stop = threading.Event()
    closes = []
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": 64, "ignore_eos": True})

    def busy_client():
        # Completions take long enough that no connection reaches httplib's
        # 100 requests per kept-alive connection during the test.
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        n_close = 0
        while not stop.is_set():
            conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            r.read()
            if (r.getheader("Connection") or "").lower() == "close":
                n_close += 1
                conn.close()  # the next request opens a new connection
        conn.close()
        closes.append(n_close)

    clients = [threading.Thread(target=busy_client) for _ in range(4)]
    try:
        for c in clients:
            c.start()
        time.sleep(0.5)
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5)
        try:
            conn.request("GET", "/health")
            r = conn.getresponse()
            r.read()
        except socket.timeout:
            pytest.fail("a new connection got no answer in 5 s behind kept-alive ones")
        finally:
            conn.close()
        waited = time.monotonic() - t0
        assert r.status == 200
        assert waited < 2.0, f"a new connection waited {waited:.2f} s behind kept-alive ones"
    finally:
        stop.set()
        for c in clients:
            c.join(timeout=30)
        assert s.stop() == 0, s.log_text()
    assert sum(closes) > 0, "no busy connection was asked to close"


@pytest.mark.parametrize("what", ["messages", "tools"])
def test_more_messages_or_tools_than_a_slot_holds_tokens_are_refused_at_once(what):
    """Each takes at least one token: refused before the template renders 100,000 of them."""
    s = ServerProcess("-np", "1", "-c", "512", "-t", "1")
    try:
        body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        if what == "messages":
            body["messages"] = [{"role": "user" if i % 2 == 0 else "assistant", "content": "hi"}
                                for i in range(100000)]
        else:
            body["tools"] = [{"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}}}
                             for i in range(2000)]
        r = s.post("/v1/chat/completions", body)
        err = assert_error(r, 400, param=what)
        assert err["type"] == "exceed_context_size_error"
        assert f"{len(body[what])} {what}" in err["message"] and "at least one token" in err["message"], err
        # A request that fits is served as before.
        r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0, s.log_text()
