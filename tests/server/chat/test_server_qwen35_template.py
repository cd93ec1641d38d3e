"""Qwen 3.5's own chat template (the pin's models/templates/Qwen3.5-4B.jinja)
on a generated qwen35 model: its thinking switch, and an OpenAI tool call
and its result rendered back into the next prompt as its XML
(<tool_call><function=...><parameter=...>), and such a call read out of
the answer. Its grammar for a required call lets the model reason in free
text first, so a random model is not made to call: the call is given as
the start of the assistant's turn (a prefill), which the answer goes on
from and is parsed with."""

import json

import pytest

from server_harness import ServerProcess, generated_model, server_bin
from test_server_tools import ASK, WEATHER
from test_server_tools import chat as post_chat

NO_THINKING = {"enable_thinking": False}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    template = server_bin().parents[1] / "share" / "llama-tp" / "Qwen3.5-4B.jinja"
    model = generated_model(tmp_path_factory.mktemp("qwen35") / "qwen35.gguf", arch="qwen35",
                            extra=["--n-layer", "4", "--chat-template", str(template)])
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "2", model=model)
    yield s
    assert s.stop() == 0, s.log_text()


def chat(server, **body):
    r = post_chat(server, **body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_thinking_switch_renders_into_the_prompt(server):
    def prompt(**kw):
        return server.post("/apply-template", {"messages": ASK, **kw}).json()["prompt"]
    off = prompt(chat_template_kwargs=NO_THINKING)
    on = prompt()
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n"), off[-80:]
    assert on.endswith("<|im_start|>assistant\n<think>\n"), on[-80:]


def test_a_call_and_its_result_render_into_the_next_prompt(server):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    text = server.post("/apply-template", {"messages": history, "tools": [WEATHER]}).json()["prompt"]
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" in text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in text
    assert '"name": "get_weather"' in text  # the tools, described in the system turn
    # The model may answer or call again (a lazy grammar, "auto"): either is parsed.
    answer = chat(server, messages=history, tools=[WEATHER], max_tokens=8, chat_template_kwargs=NO_THINKING)
    assert answer["finish_reason"] in ("stop", "length", "tool_calls")
    assert answer["message"]["role"] == "assistant"


def test_a_call_in_the_answer_is_read_out_as_tool_calls(server):
    said = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>"
    choice = chat(server, messages=ASK + [{"role": "assistant", "content": said}], tools=[WEATHER], max_tokens=4,
                  chat_template_kwargs=NO_THINKING)
    msg = choice["message"]
    assert msg["content"] is None, msg
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
