"""Anthropic's Messages API (/v1/messages) as a coding agent drives it: a tool
call (tool_choice "any" makes the tiny model write one), the tool's result
sent back, a text answer; the same as a stream of Anthropic's events;
thinking blocks; token counting; what the API refuses."""

import json

import pytest

from server_harness import TEMPLATES, ServerProcess, assert_error, named_sse_events

WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                            "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def agent_server():
    s = ServerProcess("-np", "2", "-c", "2048", "-t", "1", "--chat-template-file", str(TEMPLATES / "tool_calls.jinja"))
    yield s
    assert s.stop() == 0, s.log_text()


def messages(server, **body):
    body.setdefault("model", "some-messages-model")
    body.setdefault("max_tokens", 120)
    body.setdefault("temperature", 0)
    return server.post("/v1/messages", body, headers={"x-api-key": "unused", "anthropic-version": "2023-06-01"})


events_of = named_sse_events


def test_tool_use_then_tool_result_then_text(agent_server):
    r = messages(agent_server, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"}, system="Be terse.")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["type"] == "message" and body["role"] == "assistant" and body["id"].startswith("msg_")
    assert body["model"] == "some-messages-model"
    assert body["stop_reason"] == "tool_use" and body["stop_sequence"] is None
    [use] = [b for b in body["content"] if b["type"] == "tool_use"]
    assert use["name"] == "get_weather" and use["input"]["city"] in ("Paris", "London")
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] > 0

    # The agent runs the tool and sends its result back; the model answers in text.
    history = ASK + [{"role": "assistant", "content": body["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use["id"],
                                                   "content": [{"type": "text", "text": "Sunny, 21 C"}]}]}]
    r = messages(agent_server, messages=history, tools=[WEATHER], max_tokens=16)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["stop_reason"] in ("end_turn", "max_tokens")
    assert [b["type"] for b in body["content"]] == ["text"]
    # The tool's result reached the prompt.
    assert agent_server.post("/v1/messages/count_tokens", {"messages": history}).json()["input_tokens"] > \
        agent_server.post("/v1/messages/count_tokens", {"messages": ASK}).json()["input_tokens"]


def test_stream_events(agent_server):
    r = messages(agent_server, messages=ASK, tools=[WEATHER], tool_choice={"type": "any"}, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    ev = events_of(r)
    names = [n for n, _ in ev]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert ev[0][1]["message"]["usage"]["input_tokens"] > 0
    starts = [d for n, d in ev if n == "content_block_start"]
    stops = [d for n, d in ev if n == "content_block_stop"]
    assert [s["index"] for s in starts] == [s["index"] for s in stops] == list(range(len(starts)))
    tool = [s for s in starts if s["content_block"]["type"] == "tool_use"]
    assert len(tool) == 1 and tool[0]["content_block"]["name"] == "get_weather"
    partial = "".join(d["delta"]["partial_json"] for n, d in ev
                      if n == "content_block_delta" and d["index"] == tool[0]["index"])
    assert json.loads(partial)["city"] in ("Paris", "London")
    assert ev[-2][1]["delta"]["stop_reason"] == "tool_use" and ev[-2][1]["usage"]["output_tokens"] > 0


def test_plain_text_stream_and_stop_sequence(agent_server):
    full = messages(agent_server, messages=ASK, max_tokens=24).json()["content"][0]["text"]
    assert len(full) > 12, full
    stop = full[len(full) // 2:len(full) // 2 + 3]
    body = messages(agent_server, messages=ASK, max_tokens=24, stop_sequences=[stop]).json()
    assert body["stop_reason"] == "stop_sequence" and body["stop_sequence"] == stop, (stop, body)
    assert body["content"][0]["text"] == full[:full.index(stop)]
    r = messages(agent_server, messages=ASK, max_tokens=24, stream=True)
    ev = events_of(r)
    text = "".join(d["delta"]["text"] for n, d in ev if n == "content_block_delta")
    assert text == full
    assert ev[1][1]["content_block"] == {"type": "text", "text": ""}


def test_thinking_blocks():
    s = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", str(TEMPLATES / "thinking.jinja"))
    try:
        grammar = 'root ::= "<think>\\nI plan.\\n</think>\\n\\nThe answer."'
        # llama-server's grammar field passes through and makes the model "think".
        r = s.post("/v1/messages", {"messages": ASK, "max_tokens": 48, "grammar": grammar})
        assert r.status_code == 200, r.text
        assert [b["type"] for b in r.json()["content"]] == ["thinking", "text"]
        assert r.json()["content"][0]["thinking"].strip() == "I plan."
        assert r.json()["content"][1]["text"] == "The answer."
        r = s.post("/v1/messages", {"messages": ASK, "max_tokens": 48, "grammar": grammar, "stream": True})
        ev = events_of(r)
        kinds = [d["content_block"]["type"] for n, d in ev if n == "content_block_start"]
        assert kinds == ["thinking", "text"]
        thought = "".join(d["delta"].get("thinking", "") for n, d in ev if n == "content_block_delta")
        assert thought.strip() == "I plan."
        history = ASK + [{"role": "assistant", "content": [{"type": "thinking", "thinking": "earlier", "signature": ""},
                                                          {"type": "text", "text": "ok"}]},
                         {"role": "user", "content": "more"}]
        n_with = s.post("/v1/messages/count_tokens", {"messages": history}).json()["input_tokens"]
        history[1]["content"] = [{"type": "text", "text": "ok"}]
        n_without = s.post("/v1/messages/count_tokens", {"messages": history}).json()["input_tokens"]
        assert n_with > n_without
        off = s.post("/v1/messages/count_tokens", {"messages": ASK, "thinking": {"type": "disabled"}}).json()
        on = s.post("/v1/messages/count_tokens", {"messages": ASK, "thinking": {"type": "enabled",
                                                                               "budget_tokens": 1024}}).json()
        assert off["input_tokens"] > on["input_tokens"]  # the empty <think></think> block
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("body,param", [
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]}, "messages[0].content[0]"),
    ({"messages": ASK, "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0]"),
    ({"messages": ASK, "tool_choice": {"type": "sometimes"}}, "tool_choice"),
    ({"messages": ASK, "max_tokens": "many"}, "max_tokens"),
    # Fields of the wrong type name themselves (they were a 500).
    ({"messages": [{"role": 5, "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes",
                                                  "content": "x"}]}]}, "messages[0].content[0].is_error"),
    ({"messages": ASK, "tool_choice": {"type": 3}}, "tool_choice.type"),
])
def test_refusals(agent_server, body, param):
    assert_error(agent_server.post("/v1/messages", body), 400, param=param)
