"""A thinking model that calls tools: one output holding a <think> block and a
tool call is read as reasoning_content plus tool_calls, blocking and streamed,
and both come back through the history. The template (thinking_tools.jinja)
opens the thinking block in the generation prompt; a reasoning budget closes
it and tool_choice "required" makes even the tiny model write the call."""

import json

import pytest

from server_harness import TEMPLATES, ServerProcess

TEMPLATE = TEMPLATES / "thinking_tools.jinja"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "enum": ["Paris", "London"]}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BODY = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 120, "temperature": 0,
        "reasoning_budget_tokens": 4}


@pytest.fixture(scope="module")
def server():
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "1", "--chat-template-file", str(TEMPLATE))
    yield s
    assert s.stop() == 0, s.log_text()


def streamed(server, body):
    """(reasoning text, {index: call}, order of delta kinds) from a streamed chat."""
    r = server.post("/v1/chat/completions", {**body, "stream": True}, stream=True)
    assert r.status_code == 200, r.text
    reasoning, calls, kinds = "", {}, []
    for line in r.iter_lines():
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        delta = json.loads(line[6:])["choices"][0]["delta"]
        assert not delta.get("content"), delta
        if delta.get("reasoning_content"):
            reasoning += delta["reasoning_content"]
            kinds.append("reasoning")
        for tc in delta.get("tool_calls", []):
            c = calls.setdefault(tc["index"], {"id": tc.get("id"), "name": "", "arguments": ""})
            c["name"] += tc["function"].get("name", "")
            c["arguments"] += tc["function"].get("arguments", "")
            kinds.append("tool_call")
    return reasoning, calls, kinds


def test_reasoning_and_tool_call_in_one_output(server):
    r = server.post("/v1/chat/completions", BODY)
    assert r.status_code == 200, r.text
    msg = r.json()["choices"][0]["message"]
    # The budget let four tokens of thinking through, then forced the end tag.
    assert msg["reasoning_content"], msg
    assert r.json()["usage"]["completion_tokens"] > 4
    for tag in ("<think>", "</think>", "<tool_call>"):
        assert tag not in msg["reasoning_content"]
    assert msg["content"] is None
    assert msg["tool_calls"], msg
    first = msg["tool_calls"][0]
    assert first["function"]["name"] == "get_weather" and first["id"].startswith("call_")
    assert json.loads(first["function"]["arguments"])["city"] in ("Paris", "London")


def test_streamed_reasoning_comes_before_the_call_and_matches_blocking(server):
    blocking = server.post("/v1/chat/completions", BODY).json()["choices"][0]["message"]
    reasoning, calls, kinds = streamed(server, BODY)
    assert reasoning == blocking["reasoning_content"]
    assert kinds[0] == "reasoning" and "tool_call" in kinds
    assert "reasoning" not in kinds[kinds.index("tool_call"):], kinds
    assert len(calls) == len(blocking["tool_calls"])
    for i, call in enumerate(blocking["tool_calls"]):
        assert calls[i]["id"].startswith("call_")
        assert calls[i]["name"] == call["function"]["name"]
        assert calls[i]["arguments"] == call["function"]["arguments"]


def test_reasoning_and_calls_given_back_in_history(server):
    turn = {"role": "assistant", "content": None, "reasoning_content": "The user wants Paris.",
            "tool_calls": [{"id": "call_1", "type": "function",
                            "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    messages = ASK + [turn, {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    r = server.post("/apply-template", {"messages": messages, "tools": [WEATHER]})
    assert r.status_code == 200, r.text
    prompt = r.json()["prompt"]
    assert "<think>\nThe user wants Paris.\n</think>" in prompt
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt
    r = server.post("/v1/chat/completions", {**BODY, "messages": messages, "tool_choice": "auto", "max_tokens": 8})
    assert r.status_code == 200, r.text
