"""Clients that connect and send nothing, or send their request a line at a
time, cannot keep /health and real requests waiting: silent connections wait
in the kernel until they send something, and every connection that has
started its request gets a thread of its own at once."""

import socket
import threading
import time
from pathlib import Path

import pytest
import requests

from server_harness import ServerProcess


@pytest.fixture(scope="module")
def server():
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1")
    yield s
    assert s.stop() == 0, s.log_text()


def open_connections(server, n, first_line):
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", server.port))
        if first_line:
            s.sendall(first_line)
        socks.append(s)
    return socks


def threads_of(server):
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))


def answered_within(server, seconds):
    t = time.time()
    r = requests.get(server.base + "/health", timeout=seconds)
    assert r.status_code == 200, r.text
    r = server.post("/v1/completions", {"prompt": "Once", "max_tokens": 2}, timeout=seconds)
    assert r.status_code == 200, r.text
    return time.time() - t


def test_silent_connections_do_not_hold_threads(server):
    # 200 connections that never send a byte: before, each held an HTTP
    # thread for the keep-alive wait (5 s) and /health waited ~20 s.
    socks = open_connections(server, 200, None)
    try:
        time.sleep(0.5)
        assert answered_within(server, 5) < 3
    finally:
        for s in socks:
            s.close()


def test_trickling_clients_do_not_starve_the_others(server):
    # 150 clients sending their headers a line every second: each holds a
    # thread as long as it likes, and before, connections beyond the pool's
    # first threads queued behind them.
    socks = open_connections(server, 150, b"GET /health HTTP/1.1\r\n")
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in socks:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            stop.wait(1)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(1)
        assert answered_within(server, 5) < 3
        assert threads_of(server) >= 150
    finally:
        stop.set()
        t.join()
        for s in socks:
            s.close()
    # The threads they took end once idle (3 s).
    deadline = time.time() + 15
    while threads_of(server) >= 100 and time.time() < deadline:
        time.sleep(0.5)
    assert threads_of(server) < 100


def test_a_request_head_sent_too_slowly_is_cut_off():
    """Headers trickling a line a second never let a read wait out the
    timeout, so only a deadline on the whole request head ends them: with a
    pool of 8 HTTP threads (--threads-http 2) and --timeout 3, ten such
    clients are cut off 3 s after the server starts reading each (the two
    the pool had no thread for, 3 s after the first eight), and /health,
    which waited behind them, is answered."""
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--threads-http", "2", "--timeout", "3")
    socks = open_connections(s, 10, b"GET /health HTTP/1.1\r\n")
    stop = threading.Event()
    cut = [None] * len(socks)
    started = time.time()

    def trickle():
        while not stop.is_set():
            for i, c in enumerate(socks):
                if cut[i] is not None:
                    continue
                try:
                    c.sendall(b"X-Slow: 1\r\n")
                    c.setblocking(False)
                    if c.recv(4096) is not None:
                        cut[i] = time.time() - started
                except BlockingIOError:
                    pass
                except OSError:
                    cut[i] = time.time() - started
                finally:
                    c.setblocking(True)
            stop.wait(1)

    t = threading.Thread(target=trickle)
    t.start()
    try:
        time.sleep(0.5)
        assert answered_within(s, 10) < 8
        deadline = time.time() + 10
        while any(c is None for c in cut) and time.time() < deadline:
            time.sleep(0.2)
        assert all(c is not None for c in cut), cut
        first, last = sorted(cut)[7], max(cut)
        assert 2.5 < first < 4.5 and last < 8.5, sorted(cut)
    finally:
        stop.set()
        t.join()
        for c in socks:
            c.close()
        assert s.stop() == 0, s.log_text()
