"""Server-sent events: chunk shapes, the final chunk, usage, [DONE]."""

import json
import re


PROMPT = "Once upon a time, there was a little girl named Lily."


def stream(server, path, body):
    body = dict(body, stream=True)
    r = server.post(path, body, stream=True)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/event-stream")
    from server_harness import sse_events
    events = sse_events(r)
    assert events[-1] == "[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def test_completion_stream_matches_blocking(server):
    body = {"prompt": PROMPT, "max_tokens": 20, "temperature": 0, "ignore_eos": True}
    chunks = stream(server, "/v1/completions", body)
    ids = {c["id"] for c in chunks}
    assert len(ids) == 1 and ids.pop().startswith("cmpl-")
    for c in chunks:
        assert c["object"] == "text_completion"
        assert c["model"] == "stories"
        assert len(c["choices"]) == 1
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["text"] for c in chunks)
    full = server.post("/v1/completions", body).json()["choices"][0]["text"]
    assert text == full
    # As llama-server: the last chunk carries the usage, asked for or not.
    assert all("usage" not in c for c in chunks[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] == 20


def test_chat_stream_shape(server):
    body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 12,
            "temperature": 0, "ignore_eos": True}
    chunks = stream(server, "/v1/chat/completions", body)
    for c in chunks:
        assert c["object"] == "chat.completion.chunk"
        assert c["id"].startswith("chatcmpl-")
        # llama-server's form: b<build>-<commit>
        assert re.fullmatch(r"b[0-9]+-([0-9a-f]{7,}|unknown)", c["system_fingerprint"]), c
    # As llama-server: the role first, its content null rather than empty.
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"][0]["delta"] == {}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    full = server.post("/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
    assert text == full


def test_stream_include_usage(server):
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "temperature": 0,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    chunks = stream(server, "/v1/chat/completions", body)
    last = chunks[-1]
    assert last["choices"] == []
    u = last["usage"]
    assert u["completion_tokens"] == 5
    assert u["total_tokens"] == u["prompt_tokens"] + 5
    assert all(c["usage"] is None for c in chunks[:-1])


def test_stream_stop_string_does_not_leak(server):
    base = {"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    full = server.post("/v1/completions", base).json()["choices"][0]["text"]
    words = full.split()
    stop = " " + words[4]
    chunks = stream(server, "/v1/completions", dict(base, stop=[stop]))
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert text == full[:full.index(stop)]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_stream_validation_error_is_plain_http(server):
    r = server.post("/v1/completions", {"prompt": PROMPT, "stream": True, "temperature": "hot"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "temperature"
