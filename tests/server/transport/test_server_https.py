"""--ssl-key-file / --ssl-cert-file: HTTPS with a self-signed certificate made
for the test, and clear refusals of half a pair or a bad one."""

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest
import requests

from server_harness import ServerProcess, model_path, server_bin


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.fail("openssl not found (Debian's ca-certificates brings it; tools/setup.sh installs that)",
                    pytrace=False)
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(crt),
                    "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return key, crt


def test_https_serves(cert):
    key, crt = cert
    s = ServerProcess("-np", "1", "-t", "1", "--ssl-key-file", str(key), "--ssl-cert-file", str(crt),
                      scheme="https", verify=str(crt))
    try:
        r = s.post("/v1/completions", {"prompt": "Once upon", "max_tokens": 3})
        assert r.status_code == 200, r.text
        assert "listening on https://" in s.log_text()
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://127.0.0.1:{s.port}/health", timeout=5)
    finally:
        assert s.stop() == 0


def test_https_keeps_connections_and_streams(cert):
    key, crt = cert
    s = ServerProcess("-np", "1", "-t", "1", "--ssl-key-file", str(key), "--ssl-cert-file", str(crt),
                      scheme="https", verify=str(crt))
    try:
        with requests.Session() as session:  # one TLS connection, kept alive across requests
            for _ in range(3):
                r = session.get(s.base + "/health", verify=str(crt), timeout=10)
                assert r.status_code == 200, r.text
            r = session.post(s.base + "/completion", json={"prompt": "Once upon", "n_predict": 4, "stream": True},
                             verify=str(crt), stream=True, timeout=30)
            events = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: ")]
            assert len(events) >= 2 and events[-1]["stop"] is True, events
    finally:
        assert s.stop() == 0


def test_a_request_head_sent_too_slowly_over_https_is_cut_off(cert):
    """As over plain HTTP (test_server_slow_clients.py): ten clients that
    finish the TLS handshake and then send their headers a line a second
    hold the 8 threads of --threads-http 2 until --timeout 3 cuts each off,
    3 s after the server starts reading it (the two queued ones after
    their turn), and /health, waiting behind them, is answered."""
    key, crt = cert
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--threads-http", "2", "--timeout", "3",
                      "--ssl-key-file", str(key), "--ssl-cert-file", str(crt), scheme="https", verify=str(crt))
    context = ssl.create_default_context(cafile=str(crt))
    stop = threading.Event()
    cut = [None] * 10
    started = time.time()

    def trickle(i):
        with socket.create_connection(("127.0.0.1", s.port)) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as c:
            c.sendall(b"GET /health HTTP/1.1\r\n")
            c.settimeout(1)
            while not stop.is_set():
                try:
                    c.sendall(b"X-Slow: 1\r\n")
                    c.recv(4096)  # an answer (the 400) or the end: cut off
                except socket.timeout:
                    continue
                except OSError:
                    pass
                cut[i] = time.time() - started
                return

    clients = [threading.Thread(target=trickle, args=(i,)) for i in range(10)]
    for t in clients:
        t.start()
    try:
        time.sleep(0.5)
        t0 = time.time()
        assert s.get("/health", timeout=10).status_code == 200
        assert time.time() - t0 < 8
        for t in clients:
            t.join(timeout=12)
        assert all(c is not None for c in cut), cut
        first, last = sorted(cut)[7], max(cut)
        assert 2.5 < first < 4.5 and last < 8.5, sorted(cut)
    finally:
        stop.set()
        for t in clients:
            t.join()
        assert s.stop() == 0, s.log_text()


def run(*args):
    return subprocess.run([str(server_bin()), "-m", str(model_path()), "--port", "0", *args], capture_output=True,
                          text=True, timeout=60)


def test_half_a_pair_or_a_bad_pair_is_refused(cert, tmp_path):
    key, crt = cert
    r = run("--ssl-key-file", str(key))
    assert r.returncode == 1 and "go together" in r.stderr, r.stderr
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    r = run("--ssl-key-file", str(key), "--ssl-cert-file", str(junk))
    assert r.returncode == 1 and "cannot use the certificate" in r.stderr, r.stderr
