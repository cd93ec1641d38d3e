"""--ssl-key-file / --ssl-cert-file: HTTPS with a self-signed certificate made
for the test, and clear refusals of half a pair or a bad one."""

import shutil
import subprocess

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
