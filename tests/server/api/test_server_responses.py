"""OpenAI's Responses API (/v1/responses): text, function calls and their
outputs sent back, the stream of response.* events, and what it refuses."""

import json

import pytest

from server_harness import TEMPLATES, ServerProcess, assert_error, named_sse_events

TEMPLATE = TEMPLATES / "tool_calls.jinja"
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city",
           "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "London"]}},
                          "required": ["city"]}}


@pytest.fixture(scope="module")
def agent():
    s = ServerProcess("-np", "2", "-c", "2048", "-t", "1", "--chat-template-file", str(TEMPLATE))
    yield s
    assert s.stop() == 0, s.log_text()


def respond(server, **body):
    body.setdefault("model", "gpt-5")
    body.setdefault("temperature", 0)
    return server.post("/v1/responses", body)


def events_of(r):
    return [data for _, data in named_sse_events(r)]


def test_text_response(agent):
    r = respond(agent, input="Tell me a story.", instructions="Be brief.", max_output_tokens=12)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "response" and body["id"].startswith("resp_") and body["model"] == "gpt-5"
    [item] = body["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    [part] = item["content"]
    assert part["type"] == "output_text" and len(part["text"]) > 0
    assert body["usage"]["output_tokens"] <= 12 and body["usage"]["input_tokens"] > 0
    assert body["usage"]["total_tokens"] == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    if body["usage"]["output_tokens"] == 12:
        assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}


def test_function_call_then_its_output(agent):
    ask = [{"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]}]
    r = respond(agent, input=ask, tools=[WEATHER], tool_choice="required", max_output_tokens=120)
    assert r.status_code == 200, r.text
    calls = [i for i in r.json()["output"] if i["type"] == "function_call"]
    assert len(calls) == 1 and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"])["city"] in ("Paris", "London")
    follow = ask + [calls[0], {"type": "function_call_output", "call_id": calls[0]["call_id"],
                               "output": "Sunny, 21 C"}]
    r = respond(agent, input=follow, tools=[WEATHER], max_output_tokens=8)
    assert r.status_code == 200, r.text
    assert [i["type"] for i in r.json()["output"]] == ["message"]
    n_follow = agent.post("/v1/responses/input_tokens", {"input": follow}).json()["input_tokens"]
    n_ask = agent.post("/v1/responses/input_tokens", {"input": ask}).json()["input_tokens"]
    assert n_follow > n_ask


def test_stream_events(agent):
    r = respond(agent, input="Tell me a story.", max_output_tokens=10, stream=True)
    ev = events_of(r)
    types = [e["type"] for e in ev]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e["sequence_number"] for e in ev] == list(range(len(ev)))
    text = "".join(e["delta"] for e in ev if e["type"] == "response.output_text.delta")
    final = ev[-1]["response"]
    assert final["output"][0]["content"][0]["text"] == text
    assert ev[-4]["text"] == text
    assert final["usage"]["output_tokens"] > 0


def test_stream_function_call(agent):
    r = respond(agent, input="Weather in Paris?", tools=[WEATHER], tool_choice="required", max_output_tokens=120,
                stream=True)
    ev = events_of(r)
    added = [e for e in ev if e["type"] == "response.output_item.added" and e["item"]["type"] == "function_call"]
    assert len(added) == 1 and added[0]["item"]["name"] == "get_weather"
    args = "".join(e["delta"] for e in ev if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(args)["city"] in ("Paris", "London")
    done = [e for e in ev if e["type"] == "response.function_call_arguments.done"]
    assert done[0]["arguments"] == args
    assert ev[-1]["response"]["output"][-1]["arguments"] == args


@pytest.mark.parametrize("body,param", [
    ({"input": "hi", "previous_response_id": "resp_123"}, "previous_response_id"),
    ({}, "input"),
    ({"input": 5}, "input"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "input[0][0]"),
    ({"input": "hi", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"input": [{"type": "computer_call"}]}, "input[0]"),
    ({"input": [{"type": "function_call_output", "call_id": None, "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({"input": [{"role": 5, "content": "hi"}]}, "input[0].role"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": ["f"], "arguments": "{}"}]}, "input[0].name"),
    ({"input": "hi", "text": {"format": "json_schema"}}, "text.format"),
])
def test_refusals(agent, body, param):
    r = agent.post("/v1/responses", body)
    assert_error(r, 400, param=param)
