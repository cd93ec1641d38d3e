"""llama-server flags that set what requests get by default or how the server
is reached: --no-cache-prompt, --sse-ping-interval, --reasoning-effort,
--skip-chat-parsing, -r/--reverse-prompt, -a/--tags in /v1/models, --path
and --reuse-port."""

import socket
import subprocess
import threading
import time

import pytest
import requests

from server_harness import TEMPLATES, ServerProcess, generated_model, model_path, server_bin

PROMPT = "Once upon a time, there was a little girl named Lily."


def complete(server, **body):
    r = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 4, "ignore_eos": True, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_no_cache_prompt_is_the_default_of_requests():
    s = ServerProcess("-np", "1", "-t", "1", "--no-cache-prompt")
    try:
        complete(s)
        again = complete(s)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert again["timings"]["prompt_n"] == again["usage"]["prompt_tokens"]
        # A request that asks for the cache still gets it.
        asked = complete(s, cache_prompt=True)
        assert asked["usage"]["prompt_tokens_details"]["cached_tokens"] == asked["usage"]["prompt_tokens"] - 1
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def slow_server(tmp_path_factory):
    """One slot and a model slow enough that a queued request waits seconds."""
    model = generated_model(tmp_path_factory.mktemp("ping") / "wide.gguf", extra=(
        "--n-embd", "1024", "--n-head", "16", "--n-head-kv", "16", "--head-dim", "64", "--n-ff", "4096",
        "--n-layer", "6"))
    s = ServerProcess("-np", "1", "-c", "4096", "-t", "1", "--sse-ping-interval", "1", model=model)
    yield s
    assert s.stop() == 0


def first_lines_while_queued(server, body):
    """Starts a long request in the only slot, then streams `body` behind it;
    returns the raw lines the queued stream sent before its first data."""
    busy = threading.Thread(target=lambda: server.post(
        "/v1/completions", {"prompt": PROMPT, "max_tokens": 400, "ignore_eos": True}, timeout=120))
    busy.start()
    deadline = time.time() + 30
    while server.get("/props").json()["busy_slots"] == 0 and time.time() < deadline:
        time.sleep(0.02)
    lines = []
    with server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "stream": True, **body},
                     stream=True, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines(decode_unicode=True):
            lines.append(line)
            if line.startswith("data: "):
                break
    busy.join()
    return lines


def test_a_silent_stream_gets_sse_comments(slow_server):
    lines = first_lines_while_queued(slow_server, {})
    assert ":" in lines[:-1], lines  # the comment line, before the first event
    assert lines[-1].startswith("data: ")


def test_a_request_can_turn_the_pings_off(slow_server):
    lines = first_lines_while_queued(slow_server, {"sse_ping_interval": -1})
    assert ":" not in lines, lines


def test_reasoning_effort_reaches_the_template(tmp_path):
    template = tmp_path / "effort.jinja"
    template.write_text("{% for m in messages %}{{ m.content }}{% endfor %}"
                        "[effort={{ reasoning_effort | default('unset') }}]")
    user = {"messages": [{"role": "user", "content": "hi"}]}
    s = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", str(template), "--reasoning-effort", "low")
    try:
        assert s.post("/apply-template", user).json()["prompt"].endswith("[effort=low]")
        r = s.post("/apply-template", {**user, "reasoning_effort": "high"})
        assert r.json()["prompt"].endswith("[effort=high]")
    finally:
        assert s.stop() == 0
    s = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", str(template))
    try:
        assert s.post("/apply-template", user).json()["prompt"].endswith("[effort=unset]")
    finally:
        assert s.stop() == 0


def test_skip_chat_parsing_keeps_thinking_in_content():
    thought = "<think>\nI plan.\n</think>\n\nThe answer."
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 48,
            "grammar": 'root ::= "' + thought.replace("\n", "\\n") + '"'}
    template = str(TEMPLATES / "thinking.jinja")
    parsed = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", template)
    try:
        m = parsed.post("/v1/chat/completions", body).json()["choices"][0]["message"]
        assert m["content"] == "The answer." and m["reasoning_content"].strip() == "I plan."
    finally:
        assert parsed.stop() == 0
    raw = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", template, "--skip-chat-parsing")
    try:
        m = raw.post("/v1/chat/completions", body).json()["choices"][0]["message"]
        assert m["content"] == thought and not m.get("reasoning_content")
    finally:
        assert raw.stop() == 0


def test_aliases_and_tags_are_listed():
    s = ServerProcess("-np", "1", "-t", "1", "-a", "stories,tiny", "--tags", "demo, test")
    try:
        (entry,) = s.get("/v1/models").json()["data"]
        assert entry["id"] == "stories"
        assert entry["aliases"] == ["stories", "tiny"]
        assert entry["tags"] == ["demo", "test"]
    finally:
        assert s.stop() == 0


def test_path_serves_files_under_the_api_prefix(tmp_path):
    (tmp_path / "index.html").write_text("<p>hello</p>")
    s = ServerProcess("-np", "1", "-t", "1", "--path", str(tmp_path), "--api-prefix", "/api",
                      health_path="/api/health")
    try:
        r = s.get("/api/index.html")
        assert r.status_code == 200 and r.text == "<p>hello</p>"
        assert "text/html" in r.headers["Content-Type"]
        assert s.get("/api/").text == "<p>hello</p>"
        assert s.get("/api/health").status_code == 200  # the API is still there
    finally:
        assert s.stop() == 0


def test_path_that_is_not_a_folder_is_refused(tmp_path):
    r = subprocess.run([str(server_bin()), "-m", str(model_path()), "--port", "0", "--path",
                        str(tmp_path / "missing")], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "--path" in r.stderr + r.stdout and "not a folder" in r.stderr + r.stdout


def test_reuse_port_lets_two_servers_share_a_port():
    first = ServerProcess("-np", "1", "-t", "1", "--reuse-port")
    try:
        second = ServerProcess("-np", "1", "-t", "1", "--reuse-port", port=first.port)
        try:
            # Either server may have answered the harness's health check.
            deadline = time.time() + 60
            while "llama-tp-server ready" not in second.log_text() and time.time() < deadline:
                assert second.proc.poll() is None, second.log_text()
                time.sleep(0.05)
            assert "llama-tp-server ready" in second.log_text()
            assert requests.get(second.base + "/health", timeout=10).status_code == 200
        finally:
            assert second.stop() == 0
    finally:
        assert first.stop() == 0


def test_without_reuse_port_a_taken_port_is_refused():
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        port = holder.getsockname()[1]
        r = subprocess.run([str(server_bin()), "-m", str(model_path()), "--host", "127.0.0.1", "--port", str(port)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "cannot listen" in r.stderr + r.stdout
    finally:
        holder.close()


def test_reverse_prompts_are_the_stop_strings_of_requests_that_give_none():
    body = {"prompt": PROMPT, "n_predict": 48, "temperature": 0, "ignore_eos": True}
    plain = ServerProcess("-np", "1", "-t", "1")
    try:
        text = plain.post("/completion", body).json()["content"]
    finally:
        assert plain.stop() == 0
    words = text.split()
    assert len(words) > 4, text
    word = words[3]
    s = ServerProcess("-np", "1", "-t", "1", "-r", word, "--reverse-prompt", "never-generated-text")
    try:
        stopped = s.post("/completion", body).json()
        assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word, stopped
        assert stopped["content"] == text[:text.index(word)]
        assert stopped["generation_settings"]["stop"] == [word, "never-generated-text"]
        # A request's own stop strings replace them; an empty list does not.
        own = s.post("/completion", {**body, "stop": ["never-generated-text"]}).json()
        assert own["content"] == text and own["stop_type"] != "word"
        assert s.post("/completion", {**body, "stop": []}).json()["stopping_word"] == word
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("escape", [True, False])
def test_escapes_in_reverse_prompts_are_processed_unless_no_escape(escape):
    s = ServerProcess("-np", "1", "-t", "1", "-r", "a\\tb", *([] if escape else ["--no-escape"]))
    try:
        body = s.post("/completion", {"prompt": PROMPT, "n_predict": 1}).json()
        assert body["generation_settings"]["stop"] == ["a\tb" if escape else "a\\tb"]
    finally:
        assert s.stop() == 0
