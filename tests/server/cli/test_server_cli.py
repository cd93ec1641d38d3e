"""Command line: bad flags exit 2, load failures exit 1, signals exit 0."""

import re
import signal
import struct
import subprocess
import threading
import time
from pathlib import Path

import requests

from gguf_layout import tensor_offsets
from server_harness import ServerProcess, generated_model, model_path, require_binary_and_model, server_bin


def run(*args, timeout=30):
    require_binary_and_model()
    return subprocess.run([str(server_bin()), *args], capture_output=True, text=True, timeout=timeout)


def test_help():
    r = run("--help")
    assert r.returncode == 0
    for flag in ("--model", "--ctx-size", "--parallel", "--api-key", "--tensor-split", "--allreduce", "--tp",
                 "--bf16-wire", "--f32-wire", "--split-invariant", "--chat-template", "--n-predict"):
        assert flag in r.stdout


def test_version_names_this_build_and_its_llama_cpp():
    r = run("--version")
    assert r.returncode == 0, r.stderr
    assert re.match(r"llama-tp-server \S+ \(b[0-9]+-([0-9a-f]{7,}|unknown)\)\nbuilt on llama.cpp [0-9a-f]{40}\n$",
                    r.stdout), r.stdout


def test_unknown_flag():
    r = run("-m", str(model_path()), "--frobnicate")
    assert r.returncode == 2
    assert "--frobnicate" in r.stderr


def test_bad_values():
    for args in (["--port", "abc"], ["--port", "70000"], ["-c", "-5"], ["-np", "0"], ["--ctx-size"],
                 ["--tp", "2", "-ts", "1,2,3"], ["--api-key-file", "/nonexistent/keys"]):
        r = run("-m", str(model_path()), *args)
        assert r.returncode == 2, (args, r.stderr)
        assert "error" in r.stderr.lower()


def test_model_that_fails_to_load(tmp_path):
    missing = tmp_path / "missing.gguf"
    r = run("-m", str(missing), "--port", "0")
    assert r.returncode == 1
    assert "missing.gguf" in r.stderr
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all" * 10)
    r = run("-m", str(junk), "--port", "0")
    assert r.returncode == 1
    assert "junk.gguf" in r.stderr


def test_a_model_that_cannot_decode_fails_at_start(tmp_path):
    """Weights that are not numbers: the warm-up step finds them before /health says ok."""
    model = generated_model(tmp_path / "f32.gguf", weight_type="f32")
    kind, offset = tensor_offsets(model)["output_norm.weight"]
    assert kind == 0  # F32
    with open(model, "r+b") as f:
        f.seek(offset)
        f.write(struct.pack("<f", float("nan")))
    r = run("-m", str(model), "--port", "0", "-c", "256", timeout=60)
    assert r.returncode == 1, r.stderr
    assert "warm-up step" in r.stderr and str(model) in r.stderr and "not numbers" in r.stderr, r.stderr
    # --no-warmup skips the step: the server starts, and the first request meets the model.
    server = ServerProcess("--no-warmup", "-c", "256", model=model)
    try:
        assert server.get("/health").status_code == 200
    finally:
        assert server.stop() == 0


def test_bad_chat_template(tmp_path):
    r = run("-m", str(model_path()), "--port", "0", "--chat-template", "{% for x in %}")
    assert r.returncode == 1
    assert "template" in r.stderr


def test_a_chat_template_nested_too_deep_is_refused_at_start(tmp_path):
    # libcommon's template engine recurses per level: 20,000 levels overflow
    # its stack (SIGSEGV) unless they are refused first.
    deep = tmp_path / "deep.jinja"
    deep.write_text("{% if true %}" * 20000 + "x" + "{% endif %}" * 20000)
    r = run("-m", str(model_path()), "--port", "0", "--chat-template-file", str(deep))
    assert r.returncode == 1, r.stderr[-2000:]
    assert "nests 20000 levels deep, more than the 256" in r.stderr, r.stderr[-2000:]
    # A template as deep as the limit loads.
    ok = tmp_path / "ok.jinja"
    ok.write_text("{% for m in messages %}" + "{% if true %}" * 255 + "{{ m.content }}" + "{% endif %}" * 255
                  + "{% endfor %}")
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--chat-template-file", str(ok))
    try:
        r = s.post("/apply-template", {"messages": [{"role": "user", "content": "deep enough"}]})
        assert r.status_code == 200 and r.json()["prompt"] == "deep enough", r.text
    finally:
        assert s.stop() == 0


def test_a_chat_template_that_recurses_without_end_is_refused_at_start(tmp_path):
    # A macro that calls itself for ever overflows the engine's stack: the
    # template is rendered in a child process first, and refused when that dies.
    endless = tmp_path / "endless.jinja"
    endless.write_text("{% macro f(m) %}{{ f(m) }}{% endmacro %}{% for m in messages %}{{ f(m) }}{% endfor %}")
    r = run("-m", str(model_path()), "--port", "0", "--chat-template-file", str(endless), timeout=90)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "chat template (--chat-template) crashes its engine" in r.stderr, r.stderr[-2000:]
    # Recursion only where a conversation has tools, or a tool's result: the
    # child renders libcommon's capability probes too, which have both.
    for branch in ("{% if tools %}{{ f(tools) }}{% endif %}",
                   "{% for m in messages %}{% if m.role == 'tool' %}{{ f(m) }}{% endif %}{% endfor %}"):
        endless.write_text("{% macro f(m) %}{{ f(m) }}{% endmacro %}"
                           "{% for m in messages %}{{ m.content }}{% endfor %}" + branch)
        r = run("-m", str(model_path()), "--port", "0", "--chat-template-file", str(endless), timeout=90)
        assert r.returncode == 1, (branch, r.stderr[-2000:])
        assert "crashes its engine" in r.stderr, (branch, r.stderr[-2000:])
    # A macro that recurses to an end renders.
    tree = tmp_path / "tree.jinja"
    tree.write_text("{% macro down(n) %}{% if n > 0 %}{{ n }},{{ down(n - 1) }}{% endif %}{% endmacro %}"
                    "{% for m in messages %}{{ down(3) }}{{ m.content }}{% endfor %}")
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--chat-template-file", str(tree))
    try:
        r = s.post("/apply-template", {"messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 200 and r.json()["prompt"] == "3,2,1,x", r.text
    finally:
        assert s.stop() == 0


def test_a_chat_template_that_recurses_without_end_for_one_conversation_refuses_it(tmp_path):
    # The macro ends for every conversation the start-up probes render and
    # recurses for ever on one message: each request is rendered by a
    # renderer process first, so that one is a 400 and the server goes on.
    endless = tmp_path / "endless.jinja"
    endless.write_text("{% macro f(m) %}{% if m.content == 'loop forever' %}{{ f(m) }}{% endif %}{% endmacro %}"
                       "{% for m in messages %}{{ f(m) }}[{{ m.role }}] {{ m.content }}\n{% endfor %}")
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--chat-template-file", str(endless))
    try:
        fine = {"messages": [{"role": "user", "content": "hello"}]}
        r = s.post("/apply-template", fine)
        assert r.status_code == 200 and r.json()["prompt"] == "[user] hello\n", r.text
        for path in ("/apply-template", "/v1/chat/completions"):
            r = s.post(path, {"messages": [{"role": "user", "content": "loop forever"}], "max_tokens": 2})
            assert r.status_code == 400, (path, r.text)
            assert "crashes its engine" in r.json()["error"]["message"], r.text
        assert s.get("/health").status_code == 200
        # The next conversation starts another renderer.
        r = s.post("/v1/chat/completions", dict(fine, max_tokens=2))
        assert r.status_code == 200, r.text
        assert s.post("/apply-template", fine).json()["prompt"] == "[user] hello\n"
    finally:
        assert s.stop() == 0


def test_chat_template_override_and_summary(tmp_path):
    tmpl = tmp_path / "t.jinja"
    tmpl.write_text("{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                    "{% if add_generation_prompt %}[assistant] {% endif %}")
    s = ServerProcess("-np", "2", "-c", "1024", "-t", "1", "-n", "3", "--chat-template-file", str(tmpl))
    try:
        p = s.get("/props").json()
        assert p["chat_template_origin"] == "override"
        assert "[assistant]" in p["chat_template"]
        r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200, r.text
        # The chat prompt is rendered by the override: "[user] hi\n[assistant] ".
        n_expected = len(s.post("/tokenize", {"content": "[user] hi\n[assistant] ", "add_special": True})
                         .json()["tokens"])
        assert r.json()["usage"]["prompt_tokens"] == n_expected
        # -n 3 caps requests that give no max_tokens.
        r = s.post("/v1/completions", {"prompt": "Once", "ignore_eos": True})
        assert r.json()["usage"]["completion_tokens"] == 3
        log = s.log_text()
        summary = [l for l in log.splitlines() if "ready:" in l]
        assert len(summary) == 1, log
        for part in ("model", "tp 1", "ctx 1024", "slots 2", "KV cells per slot", "listening on http://127.0.0.1:"):
            assert part in summary[0], summary[0]
    finally:
        assert s.stop() == 0


def test_kv_unified_serves_the_same_greedy_text():
    body = {"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    texts = []
    for extra in ((), ("--kv-unified",)):
        s = ServerProcess("-np", "2", "-c", "512", "-t", "1", *extra)
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            texts.append(r.json()["choices"][0]["text"])
            if extra:
                assert "KV cells shared" in s.log_text()
        finally:
            assert s.stop() == 0
    assert texts[0] == texts[1]


def test_split_invariant_tp2_serves_the_text_of_one_device():
    body = {"prompt": "Once upon a time", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    texts = []
    for extra in (("-t", "1"), ("--tp", "2", "-t", "2")):
        s = ServerProcess("-np", "1", "-c", "256", "--split-invariant", *extra)
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            texts.append(r.json()["choices"][0]["text"])
            assert "split-invariant sums" in s.log_text()
        finally:
            assert s.stop() == 0
    assert texts[0] == texts[1]
    assert len(texts[0]) > 0


def test_split_invariant_quantized_tp_gives_one_devices_logprobs(tmp_path):
    # A generated q8_0 model: with the default sums a split can flip an
    # activation's rounding (llama-tp-compare measures how often); with
    # split-invariant sums every split answers with one device's numbers.
    model = generated_model(tmp_path / "llama-q8_0.gguf")
    body = {"prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 5}
    answers = []
    for extra in (("-t", "1"), ("--tp", "2", "-t", "2"), ("--tp", "2", "-ts", "3,1", "-t", "2")):
        s = ServerProcess("-np", "1", "-c", "256", "--split-invariant", *extra, model=model)
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            answers.append(r.json()["choices"][0]["logprobs"])
        finally:
            assert s.stop() == 0
    assert len(answers[0]["tokens"]) == 12
    assert answers[1] == answers[0]
    assert answers[2] == answers[0]


def ready_line(s) -> str:
    return [l for l in s.log_text().splitlines() if "ready:" in l][0]


# The K-quant kernels make split-invariant sums the default only where
# their AVX-512 path runs, the q4_0 and IQ4_XS ones where AVX-512 VNNI runs
# their panels (docs/split-invariant.md).
K_QUANT_SUMS_FREE = "avx512bw" in Path("/proc/cpuinfo").read_text()
Q4_0_SUMS_FREE = K_QUANT_SUMS_FREE and "avx512_vnni" in Path("/proc/cpuinfo").read_text()


def default_sums_answers(model, body, log_says):
    """TP=1 and TP=2 with no sums flag: split-invariant sums named in the ready
    line and log_says in the log, and the two answers' logprobs."""
    answers = []
    for extra in (("-t", "1"), ("--tp", "2", "-t", "2")):
        s = ServerProcess("-np", "1", "-c", "256", *extra, model=model)
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            answers.append(r.json()["choices"][0]["logprobs"])
            assert "split-invariant sums" in ready_line(s)
            assert log_says in s.log_text()
        finally:
            assert s.stop() == 0
    return answers


def test_split_invariant_sums_are_the_default_where_free(tmp_path):
    # q8_0 (and, with AVX-512, q4_k) dense layers have a one-pass exact
    # product: split-invariant by default, so TP=2 answers with one device's
    # numbers without the flag.
    q8 = generated_model(tmp_path / "llama-q8_0.gguf")
    body = {"prompt": "The quick brown fox", "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 3}
    answers = default_sums_answers(q8, body, "one pass over every row-parallel matrix (q8_0 ")
    assert answers[1] == answers[0]
    # Asked for the float sums, or a BF16 wire: those.
    for extra in (("--no-split-invariant",), ("--tp", "2", "-t", "2", "--bf16-wire")):
        s = ServerProcess("-np", "1", "-c", "256", *extra, model=q8)
        try:
            assert s.post("/v1/completions", body).status_code == 200
            assert "split-invariant" not in ready_line(s)
        finally:
            assert s.stop() == 0
    # (heads of 64 and an FFN of 1024: two ranks' slices on q4_K's 256-value blocks)
    q4k = generated_model(tmp_path / "llama-q4_k.gguf", weight_type="q4_k", extra=["--head-dim", "64", "--n-ff", "1024"])
    if K_QUANT_SUMS_FREE:
        answers = default_sums_answers(q4k, body, "q4_K avx512")  # the q4_K kernel named in the one-pass line
        assert answers[1] == answers[0]
    q40 = generated_model(tmp_path / "llama-q4_0.gguf", weight_type="q4_0")
    if Q4_0_SUMS_FREE:
        answers = default_sums_answers(q40, body, "q4_0 avx512")
        assert answers[1] == answers[0]
    # f16 matrices take one product per grid cell (slower), as q4_K ones do
    # without AVX-512 and q4_0 ones without VNNI: float sums by default, with
    # one line saying so; the flag still turns exact sums on.
    f16 = generated_model(tmp_path / "llama-f16.gguf", weight_type="f16")
    slow = [f16] + ([] if K_QUANT_SUMS_FREE else [q4k]) + ([] if Q4_0_SUMS_FREE else [q40])
    for model in slow:
        for extra, exact in (((), False), (("--split-invariant",), True)):
            s = ServerProcess("-np", "1", "-c", "256", *extra, model=model)
            try:
                assert s.post("/v1/completions", body).status_code == 200
                assert ("split-invariant sums" in ready_line(s)) == exact
                assert ("float sums" in s.log_text()) == (not exact)
            finally:
                assert s.stop() == 0
    # The file's general.file_type under llama-server's name.
    s = ServerProcess("-np", "1", "-c", "256", model=q4k)
    try:
        assert s.get("/v1/models").json()["data"][0]["meta"]["ftype"] == "Q4_K - Medium"
    finally:
        assert s.stop() == 0


def test_bf16_wire_serves_and_says_so():
    s = ServerProcess("--tp", "2", "-t", "2", "-c", "256", "--bf16-wire")
    try:
        r = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] >= 1
        summary = [l for l in s.log_text().splitlines() if "ready:" in l]
        assert "bf16 wire" in summary[0], summary
    finally:
        assert s.stop() == 0


def test_f32_wire_serves_and_excludes_bf16():
    s = ServerProcess("--tp", "2", "-t", "2", "-c", "256", "--no-split-invariant", "--f32-wire")
    try:
        r = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
        assert r.status_code == 200, r.text
        summary = [l for l in s.log_text().splitlines() if "ready:" in l]
        assert "bf16 wire" not in summary[0], summary
    finally:
        assert s.stop() == 0
    for flags in (("--bf16-wire", "--f32-wire"), ("--f32-wire", "--bf16-wire")):
        r = run("-m", str(model_path()), "--tp", "2", *flags, "--port", "0")
        assert r.returncode == 2, r.stderr
        assert "--bf16-wire and --f32-wire exclude each other" in r.stderr.replace(
            "--f32-wire and --bf16-wire", "--bf16-wire and --f32-wire"), r.stderr


def test_split_invariant_refuses_a_bf16_wire():
    r = run("-m", str(model_path()), "--tp", "2", "--split-invariant", "--bf16-wire", "--port", "0")
    assert r.returncode != 0
    assert "--bf16-wire" in r.stderr


def test_sigint_exits_zero():
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1")
    s.proc.send_signal(signal.SIGINT)
    assert s.proc.wait(timeout=15) == 0
    assert "shutting down" in s.log_text()
    s.stop()


def test_sigterm_during_generation_exits_zero():
    s = ServerProcess("-np", "1", "-c", "16384", "-t", "1")
    got = {}

    def client():
        try:
            r = requests.post(s.base + "/v1/completions", json={
                "prompt": "Once", "max_tokens": 16000, "ignore_eos": True, "stream": True}, stream=True, timeout=60)
            got["lines"] = [l for l in r.iter_lines(decode_unicode=True) if l]
        except requests.RequestException as e:
            got["error"] = e

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.5)
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=15) == 0
    t.join(timeout=15)
    assert not t.is_alive()
    s.stop()


def test_several_hosts_and_a_unix_socket(tmp_path):
    from server_harness import free_port
    port = free_port()
    sock = tmp_path / "llama.sock"
    s = ServerProcess(leading_args=["-m", str(model_path()), "--host", f"127.0.0.1,127.0.0.2,{sock}",
                                    "--port", str(port), "-np", "1", "-t", "1"], port=port)
    try:
        assert requests.get(f"http://127.0.0.2:{port}/health", timeout=10).json() == {"status": "ok"}
        import socket as socketlib
        with socketlib.socket(socketlib.AF_UNIX, socketlib.SOCK_STREAM) as c:
            c.settimeout(10)
            c.connect(str(sock))
            c.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := c.recv(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 200") and b'"status":"ok"' in reply, reply
        ready = [l for l in s.log_text().splitlines() if "ready:" in l][0]
        assert f"http://127.0.0.1:{port}, http://127.0.0.2:{port}, unix:{sock}" in ready, ready
    finally:
        assert s.stop() == 0


def test_override_kv_replaces_the_files_metadata():
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--override-kv",
                      "llama.context_length=int:777,tokenizer.ggml.add_bos_token=bool:false")
    try:
        meta = s.get("/v1/models").json()["data"][0]["meta"]
        assert meta["n_ctx_train"] == 777
        assert "metadata override llama.context_length=int:777" in s.log_text()
        # Without BOS the prompt is one token shorter than the file's tokenizer makes it.
        tokens = s.post("/tokenize", {"content": "Once upon a time", "add_special": True}).json()["tokens"]
    finally:
        assert s.stop() == 0
    plain = ServerProcess("-np", "1", "-c", "256", "-t", "1")
    try:
        assert len(plain.post("/tokenize", {"content": "Once upon a time", "add_special": True}).json()["tokens"]) \
            == len(tokens) + 1
    finally:
        assert plain.stop() == 0
    r = run("-m", str(model_path()), "--override-kv", "llama.context_length:777")
    assert r.returncode == 2 and "--override-kv" in r.stderr, r.stderr


def test_check_tensors_and_two_value_flags_are_read():
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--check-tensors", "--control-vector-layer-range", "1", "2")
    try:
        r = s.post("/completion", {"prompt": "Once", "n_predict": 2})
        assert r.status_code == 200, r.text
        assert "has no effect" not in s.log_text()
    finally:
        assert s.stop() == 0
    r = run("-m", str(model_path()), "--control-vector-layer-range", "1")
    assert r.returncode == 2 and "--control-vector-layer-range" in r.stderr, r.stderr
