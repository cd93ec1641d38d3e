"""Tool calls in /v1/chat/completions, end to end: a chat template with a tool
call format libcommon knows (tests/server/templates/tool_calls.jinja, calls as
bare JSON objects), and tool_choice "required", whose grammar makes even the
tiny test model write a well-formed call. Enum arguments keep it short."""

import json

import pytest

from server_harness import TEMPLATES, ServerProcess, assert_error

TEMPLATE = TEMPLATES / "tool_calls.jinja"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string", "enum": ["UTC"]}}, "required": ["zone"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def tool_server():
    s = ServerProcess("-np", "2", "-c", "2048", "-t", "1", "--chat-template-file", str(TEMPLATE))
    yield s
    assert s.stop() == 0, s.log_text()


def chat(server, **body):
    body.setdefault("messages", ASK)
    body.setdefault("max_tokens", 120)
    body.setdefault("temperature", 0)
    return server.post("/v1/chat/completions", body)


def test_required_tool_call(tool_server):
    r = chat(tool_server, tools=[WEATHER], tool_choice="required")
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["role"] == "assistant" and msg["content"] is None
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    args = json.loads(call["function"]["arguments"])
    assert args["city"] in ("Paris", "London")


def test_named_tool_choice_picks_that_function(tool_server):
    r = chat(tool_server, tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert r.status_code == 200, r.text
    [call] = r.json()["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_time"
    assert json.loads(call["function"]["arguments"]) == {"zone": "UTC"}


def test_streamed_tool_call_matches_blocking(tool_server):
    blocking = chat(tool_server, tools=[WEATHER], tool_choice="required").json()["choices"][0]["message"]
    r = tool_server.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 120, "temperature": 0,
                                                  "tools": [WEATHER], "tool_choice": "required", "stream": True},
                         stream=True)
    assert r.status_code == 200
    calls, finish, content = {}, None, ""
    for line in r.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        choices = json.loads(line[6:])["choices"]
        if not choices:
            continue
        delta = choices[0]["delta"]
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"id": None, "name": "", "arguments": ""})
            if "id" in tc:
                assert c["id"] is None, "the id comes once, with the first delta of a call"
                c["id"] = tc["id"]
                assert tc["type"] == "function"
                c["name"] = tc["function"]["name"]
            c["arguments"] += tc["function"].get("arguments", "")
        finish = choices[0]["finish_reason"] or finish
    assert finish == "tool_calls"
    assert content == ""
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["name"] == blocking["tool_calls"][0]["function"]["name"]
    assert calls[0]["arguments"] == blocking["tool_calls"][0]["function"]["arguments"]


def test_tool_results_in_history(tool_server):
    history = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    r = chat(tool_server, messages=history, tools=[WEATHER], max_tokens=8)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert isinstance(msg["content"], str)
    assert r.json()["choices"][0]["finish_reason"] in ("stop", "length")
    # The rendered history is in the prompt: a longer prompt than the question alone.
    short = chat(tool_server, tools=[WEATHER], max_tokens=1).json()["usage"]["prompt_tokens"]
    assert r.json()["usage"]["prompt_tokens"] > short


def test_auto_without_call_is_plain_content(tool_server):
    r = chat(tool_server, tools=[WEATHER], tool_choice="auto", max_tokens=8)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert "tool_calls" not in choice["message"]
    assert choice["finish_reason"] == "length"


def test_tool_choice_none_renders_no_calls(tool_server):
    r = chat(tool_server, tools=[WEATHER], tool_choice="none", max_tokens=8)
    assert r.status_code == 200, r.text
    assert "tool_calls" not in r.json()["choices"][0]["message"]


def test_invalid_tool_is_400(tool_server):
    r = chat(tool_server, tools=[{"type": "function", "function": {"name": 7}}])
    assert_error(r, 400, param="tools[0].function.name")


def test_streamed_auto_content_matches_blocking(tool_server):
    body = {"messages": ASK, "max_tokens": 12, "temperature": 0, "tools": [WEATHER], "tool_choice": "auto"}
    blocking = tool_server.post("/v1/chat/completions", body).json()["choices"][0]
    r = tool_server.post("/v1/chat/completions", {**body, "stream": True}, stream=True)
    content, finish = "", None
    for line in r.iter_lines():
        if line.startswith(b"data: ") and line != b"data: [DONE]":
            choice = json.loads(line[6:])["choices"][0]
            assert "tool_calls" not in choice["delta"]
            content += choice["delta"].get("content") or ""
            finish = choice["finish_reason"] or finish
    assert content == blocking["message"]["content"]
    assert finish == blocking["finish_reason"] == "length"


TAGGED_TEMPLATE = TEMPLATES / "tool_call_tags.jinja"


@pytest.fixture(scope="module")
def tagged_server():
    # Calls between <tool_call> tags: libcommon makes tool_choice "auto" a lazy
    # grammar that starts at the opening tag. -v logs how the grammar was set.
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "1", "-v", "--chat-template-file", str(TAGGED_TEMPLATE))
    yield s
    assert s.stop() == 0, s.log_text()


def test_tagged_required_call_is_parsed(tagged_server):
    # The tiny model repeats calls until max_tokens (this format's grammar
    # allows several): every call is get_weather, all but a cut-off last one
    # have complete arguments.
    r = chat(tagged_server, tools=[WEATHER], tool_choice="required")
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    calls = choice["message"]["tool_calls"]
    assert calls and all(c["function"]["name"] == "get_weather" for c in calls), calls
    complete = calls if choice["finish_reason"] == "tool_calls" else calls[:-1]
    assert complete, choice
    for call in complete:
        assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "London")


def test_auto_uses_the_lazy_grammar_and_stays_free_text_until_its_trigger(tagged_server):
    free = chat(tagged_server, max_tokens=10).json()["choices"][0]["message"]["content"]
    r = chat(tagged_server, tools=[WEATHER], tool_choice="auto", max_tokens=10)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    assert "tool_calls" not in msg and msg["content"], msg
    assert "lazy tool grammar, 1 trigger patterns" in tagged_server.log_text()
    # The tiny model never writes the opening tag, so the text is unconstrained
    # (the prompt differs from the one without tools, so only its kind is compared).
    assert isinstance(free, str) and free
