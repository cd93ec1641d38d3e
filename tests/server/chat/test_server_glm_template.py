"""GLM-4.5's family served as its releases ship: a generated glm4moe model
(experts beside a shared expert, split across two ranks) with GLM 4.6's
chat template (the pin's models/templates/GLM-4.6.jinja, which
llama-tp-make-model writes into the file), four slots at once. Its turns and
thinking switch render into the prompt, thinking goes to reasoning_content
(whole and streamed; the tiny model is made to "think" by a grammar), a call
and its result render back as GLM's <arg_key>/<arg_value> XML, and a call
given as the start of the assistant's turn is read out as tool_calls (a
required call continues it: a random model is not made to call)."""

import json
import threading

import pytest

from server_harness import ServerProcess, generated_model
from test_server_tools import ASK, WEATHER
from test_server_tools import chat as post_chat

NO_THINKING = {"enable_thinking": False}
THOUGHT = "\n<think>I plan.</think>\nThe answer."
GRAMMAR = 'root ::= "' + THOUGHT.replace("\n", "\\n") + '"'
CALL = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = generated_model(tmp_path_factory.mktemp("glm4moe") / "glm4moe.gguf", arch="glm4moe",
                            extra=["--n-layer", "3", "--n-expert", "4", "--n-ff-exp", "256"])
    s = ServerProcess("--tp", "2", "-np", "4", "-c", "4096", "-t", "2", model=model)
    yield s
    assert s.stop() == 0, s.log_text()


def prompt_of(server, **body):
    r = server.post("/apply-template", body)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def chat(server, **body):
    r = post_chat(server, **body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_turns_and_thinking_switch_render_into_the_prompt(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert prompt_of(server, messages=messages) == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi there<|assistant|>"
    off = prompt_of(server, messages=messages, chat_template_kwargs=NO_THINKING)
    assert off.endswith("Hi there/nothink<|assistant|>\n<think></think>"), off[-60:]


def test_thinking_goes_to_reasoning_content(server):
    msg = chat(server, grammar=GRAMMAR, max_tokens=48)["message"]
    assert msg["reasoning_content"] == "I plan."
    assert msg["content"] == "The answer."


def test_stream_sends_reasoning_deltas_before_content(server):
    r = server.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 48, "grammar": GRAMMAR,
                                             "temperature": 0, "stream": True}, stream=True)
    assert r.status_code == 200
    reasoning, content, order = "", "", []
    for line in r.iter_lines(decode_unicode=True):
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        choices = json.loads(line[6:])["choices"]
        delta = choices[0]["delta"] if choices else {}
        if delta.get("reasoning_content"):
            reasoning += delta["reasoning_content"]
            order.append("r")
        if delta.get("content"):
            content += delta["content"]
            order.append("c")
    assert (reasoning, content) == ("I plan.", "The answer.")
    assert order == sorted(order, reverse=True), order  # every reasoning delta before the first content delta


def test_a_call_and_its_result_render_into_the_next_prompt(server):
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    text = prompt_of(server, messages=history, tools=[WEATHER])
    assert CALL + "<|observation|>\n<tool_response>\nsunny, 21 C\n</tool_response><|assistant|>" in text, text[-300:]
    assert '"name": "get_weather"' in text  # the tools, described in the system turn
    answer = chat(server, messages=history, tools=[WEATHER], max_tokens=8, chat_template_kwargs=NO_THINKING)
    assert answer["finish_reason"] in ("stop", "length", "tool_calls")
    assert answer["message"]["role"] == "assistant"


def test_a_call_in_the_answer_is_read_out_as_tool_calls(server):
    choice = chat(server, messages=ASK + [{"role": "assistant", "content": CALL}], tools=[WEATHER],
                  tool_choice="required", max_tokens=8, chat_template_kwargs=NO_THINKING)
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None, msg
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_four_streams_at_once_answer_as_one_alone(server):
    """Four streamed greedy chats in the four slots at once: each the text of
    the same chat alone, not streamed."""
    questions = [[{"role": "user", "content": f"Tell me about river {i}."}] for i in range(4)]
    alone = [chat(server, messages=q, max_tokens=16, ignore_eos=True, chat_template_kwargs=NO_THINKING)
             for q in questions]
    streamed = [None] * 4

    def stream(i):
        r = server.post("/v1/chat/completions", {"messages": questions[i], "max_tokens": 16, "temperature": 0,
                                                 "ignore_eos": True, "chat_template_kwargs": NO_THINKING,
                                                 "stream": True}, stream=True)
        r.encoding = "utf-8"
        text = ""
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                text += (choices[0]["delta"].get("content") or "") if choices else ""
        streamed[i] = text

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert streamed == [a["message"]["content"] for a in alone]
    assert all(a["finish_reason"] == "length" for a in alone)
