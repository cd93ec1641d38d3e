"""Harness for the llama-tp-server tests: start the real server binary on a
free port with the small test model, wait until /health says ok, and stop it
(SIGTERM, expecting exit 0) at the end. (A uniquely named module rather than
conftest, so that test files can import it next to other suites' conftests.)

Environment:
  LLAMA_TP_SERVER_BIN   server binary (default: <repo>/build/bin/llama-tp-server)
  LLAMA_TP_TEST_MODEL   model (default: <repo>/models/stories260K.gguf)

Run with the system interpreter: /usr/bin/python3 -m pytest tests/server
"""

import os
import random
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
# Chat templates the tests serve with (--chat-template-file).
TEMPLATES = Path(__file__).resolve().parent / "templates"
STARTUP_TIMEOUT_S = 60


def server_bin() -> Path:
    return Path(os.environ.get("LLAMA_TP_SERVER_BIN", REPO / "build" / "bin" / "llama-tp-server"))


def model_path() -> Path:
    if "LLAMA_TP_TEST_MODEL" in os.environ:
        return Path(os.environ["LLAMA_TP_TEST_MODEL"])
    return REPO / "models" / "stories260K.gguf"


def require_binary_and_model():
    b = server_bin()
    if not b.exists():
        pytest.fail(f"server binary not found: {b} (build it with "
                    f"`cmake --build build --target llama-tp-server`, or set LLAMA_TP_SERVER_BIN)",
                    pytrace=False)
    m = model_path()
    if not m.exists():
        pytest.fail(f"test model not found: {m} (set LLAMA_TP_TEST_MODEL)", pytrace=False)


def generated_model(path, seed=7, arch="llama", weight_type="q8_0", vocab=None, extra=()) -> Path:
    """A small generated model with 32-wide heads (quantized KV caches fit it);
    vocab: a ggml-vocab-*.gguf name from the build's share/llama-tp/;
    extra: more llama-tp-make-model arguments."""
    extra = [*(["--vocab", str(server_bin().parents[1] / "share" / "llama-tp" / vocab)] if vocab else []), *extra]
    subprocess.run([str(server_bin().parent / "llama-tp-make-model"), "--arch", arch, "--type", weight_type,
                    "--seed", str(seed), "--n-embd", "256", "--n-head", "8", "--n-head-kv", "4", "--head-dim", "32",
                    "--n-ff", "768", "--n-layer", "2", *extra, "-o", str(path)], check=True, capture_output=True,
                   timeout=120)
    return Path(path)


def ephemeral_ports() -> range:
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        return range(low, high + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def free_port() -> int:
    """A free port outside the kernel's ephemeral range: a port the kernel
    hands out to any bind(0), such as mpirun's own listening sockets, could
    be taken between this check and the server's bind."""
    ephemeral = ephemeral_ports()
    candidates = [p for p in range(10000, 32768) if p not in ephemeral] or list(range(10000, 65536))
    for port in random.sample(candidates, 200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port found outside the ephemeral range")


class ServerProcess:
    """launcher: words before the server's command line (mpirun and its options)."""

    def __init__(self, *extra_args, api_key=None, model=None, launcher=(), env=None, leading_args=None,
                 port=None, health_path="/health", scheme="http", verify=True, binary=None):
        """leading_args: replaces "-m MODEL --host --port" (for command lines that name these themselves);
        binary: another server than llama-tp-server (llama-server, for the differential tests)."""
        require_binary_and_model()
        self.port = port or free_port()
        self.base = f"{scheme}://127.0.0.1:{self.port}"
        self.verify = verify  # requests' verify: a CA bundle path for a self-signed HTTPS server
        self.api_key = api_key
        first = leading_args if leading_args is not None else [
            "-m", str(model or model_path()), "--host", "127.0.0.1", "--port", str(self.port)]
        args = [*launcher, str(binary or server_bin()), *first, *extra_args]
        if api_key:
            args += ["--api-key", api_key]
        self.args = args
        self.log = tempfile.NamedTemporaryFile(prefix="llama-tp-server-", suffix=".log", delete=False)
        self.health_path = health_path
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=None if env is None else {**os.environ, **env})
        self._wait_ready()

    final_log = None

    def log_text(self) -> str:
        if self.final_log is not None:
            return self.final_log
        return Path(self.log.name).read_text(errors="replace")

    def _wait_ready(self):
        deadline = time.time() + STARTUP_TIMEOUT_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode} during startup:\n{self.log_text()}",
                            pytrace=False)
            try:
                r = requests.get(self.base + self.health_path, timeout=2, verify=self.verify)
                if r.status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        self.proc.kill()
        pytest.fail(f"server not healthy after {STARTUP_TIMEOUT_S}s:\n{self.log_text()}", pytrace=False)

    def headers(self):
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def get(self, path, **kw):
        kw.setdefault("timeout", 60)
        kw.setdefault("verify", self.verify)
        kw.setdefault("headers", self.headers())
        return requests.get(self.base + path, **kw)

    def settled_props(self, timeout=2.0):
        """/props once no slot is busy and nothing is queued (a slot is released
        just after its last response is written), or the last answer at the deadline."""
        deadline = time.time() + timeout
        while True:
            props = self.get("/props").json()
            if (props["busy_slots"] == 0 and props["queued_requests"] == 0) or time.time() > deadline:
                return props
            time.sleep(0.02)

    def post(self, path, body=None, **kw):
        kw.setdefault("timeout", 60)
        kw.setdefault("verify", self.verify)
        kw.setdefault("headers", self.headers())
        if body is not None and "data" not in kw:
            kw["json"] = body
        return requests.post(self.base + path, **kw)

    def stop(self, timeout=15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"server did not exit within {timeout}s of SIGTERM:\n{self.log_text()}",
                            pytrace=False)
        if self.final_log is None:
            self.final_log = self.log_text()
            self.log.close()
            os.unlink(self.log.name)
        return self.proc.returncode


def named_sse_events(r):
    """[(event name, data)] of a stream of named server-sent events; every
    data object's "type" is its event's name (Anthropic's and the Responses API's)."""
    import json
    out, name = [], None
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            assert data["type"] == name, (name, data)
            out.append((name, data))
    return out


def assert_error(r, status, param=None, code=None):
    """An OpenAI error object with the expected HTTP status."""
    assert r.status_code == status, f"expected {status}, got {r.status_code}: {r.text}"
    body = r.json()
    assert isinstance(body, dict) and "error" in body, body
    err = body["error"]
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    assert "param" in err and "code" in err, err
    if param is not None:
        assert err["param"] == param, err
    if code is not None:
        assert err["code"] == code, err
    return err


def sse_events(resp):
    """The `data:` payloads of an SSE response, as strings, in order (comment
    lines, the server's pings, are skipped as clients skip them)."""
    out = []
    for line in resp.iter_lines(decode_unicode=True):
        if line is None or line == "" or line.startswith(":"):
            continue
        assert line.startswith("data: "), f"unexpected SSE line: {line!r}"
        out.append(line[len("data: "):])
    return out


def parse_metrics(text):
    """{name or name{labels}: value}, checking that every sample has HELP and TYPE."""
    helped, typed, values = set(), set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("counter", "gauge"), line
            typed.add(name)
        elif line:
            m = re.fullmatch(r'([a-z_:]+)(\{[^}]*\})? (\S+)', line)
            assert m, line
            assert m.group(1) in helped and m.group(1) in typed, line
            values[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return values
