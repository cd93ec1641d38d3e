"""GLM-4.5's and DeepSeek V3's families served as their releases ship: a
generated glm4moe model with GLM 4.6's chat template and a generated
deepseek2 model (latent attention) with DeepSeek V3.1's (the pin's
models/templates/, which llama-tp-make-model writes into the files), split
across two ranks, four slots at once. For each: its turns and thinking
switch render into the prompt, thinking goes to reasoning_content (whole
and streamed; the tiny model is made to "think" by a grammar), a call and
its result render back in the family's own format (GLM's
<arg_key>/<arg_value> XML, DeepSeek's <｜tool▁call▁begin｜> blocks), a call
given as the start of the assistant's turn is read out as tool_calls (a
required call continues it: a random model is not made to call), and four
streams at once each run to its end."""

import json
import threading

import pytest

from server_harness import ServerProcess, generated_model
from test_server_tools import ASK, WEATHER
from test_server_tools import chat as post_chat

NO_THINKING = {"enable_thinking": False}
DS_CALL = ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
           '{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>')
GLM_CALL = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"

# Per family: its make-model arguments; the prompt of a system and a user
# message, with thinking on and its end with it off; what a thinking model
# says (made so by a grammar); a call in its format; a call and its result
# as they render back.
FAMILIES = {
    "glm4moe": {
        "extra": ["--n-layer", "3", "--n-expert", "4", "--n-ff-exp", "256"],
        "prompt": "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi there<|assistant|>",
        "no_thinking_end": "Hi there/nothink<|assistant|>\n<think></think>",
        "thought": "\n<think>I plan.</think>\nThe answer.",
        "call": GLM_CALL,
        "call_and_result": GLM_CALL + "<|observation|>\n<tool_response>\nsunny, 21 C\n</tool_response><|assistant|>",
    },
    "deepseek2": {
        "extra": ["--n-layer", "3", "--n-expert", "8", "--n-ff-exp", "256"],
        "prompt": "Be brief.<｜User｜>Hi there<｜Assistant｜><think>",
        "no_thinking_end": "<｜User｜>Hi there<｜Assistant｜><think></think>",
        "thought": "I plan.</think>The answer.",
        "call": DS_CALL,
        "call_and_result": DS_CALL + "<｜end▁of▁sentence｜><｜tool▁output▁begin｜>sunny, 21 C<｜tool▁output▁end｜>",
    },
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, tmp_path_factory):
    f = FAMILIES[request.param]
    model = generated_model(tmp_path_factory.mktemp(request.param) / f"{request.param}.gguf", arch=request.param,
                            extra=f["extra"])
    s = ServerProcess("--tp", "2", "-np", "4", "-c", "4096", "-t", "2", model=model)
    yield s, f
    assert s.stop() == 0, s.log_text()


def prompt_of(server, **body):
    r = server.post("/apply-template", body)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def chat(server, **body):
    r = post_chat(server, **body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def grammar(f):
    return 'root ::= "' + f["thought"].replace("\n", "\\n") + '"'


def test_turns_and_thinking_switch_render_into_the_prompt(family):
    server, f = family
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    assert prompt_of(server, messages=messages) == f["prompt"]
    off = prompt_of(server, messages=messages, chat_template_kwargs=NO_THINKING)
    assert off.endswith(f["no_thinking_end"]), off[-60:]


def test_thinking_goes_to_reasoning_content(family):
    server, f = family
    msg = chat(server, grammar=grammar(f), max_tokens=48)["message"]
    assert msg["reasoning_content"] == "I plan."
    assert msg["content"] == "The answer."


def test_stream_sends_reasoning_deltas_before_content(family):
    server, f = family
    r = server.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 48, "grammar": grammar(f),
                                             "temperature": 0, "stream": True}, stream=True)
    assert r.status_code == 200
    r.encoding = "utf-8"
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


def test_a_call_and_its_result_render_into_the_next_prompt(family):
    server, f = family
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}]
    text = prompt_of(server, messages=history, tools=[WEATHER])
    assert f["call_and_result"] in text, text[-300:]
    answer = chat(server, messages=history, tools=[WEATHER], max_tokens=8, chat_template_kwargs=NO_THINKING)
    assert answer["finish_reason"] in ("stop", "length", "tool_calls")
    assert answer["message"]["role"] == "assistant"


def test_a_call_in_the_answer_is_read_out_as_tool_calls(family):
    server, f = family
    choice = chat(server, messages=ASK + [{"role": "assistant", "content": f["call"]}], tools=[WEATHER],
                  tool_choice="required", max_tokens=8, chat_template_kwargs=NO_THINKING)
    assert choice["finish_reason"] == "tool_calls"
    msg = choice["message"]
    assert msg["content"] is None, msg
    [call] = msg["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


def test_four_streams_at_once(family):
    """Four streamed greedy chats in the four slots at once, each to its
    end. (Their text is not compared with each alone: ggml's products of the
    experts and of the latent's expansion add in another order for a batch
    of four rows than for one.)"""
    server, _ = family
    questions = [[{"role": "user", "content": f"Tell me about river {i}."}] for i in range(4)]
    results = [None] * 4

    def stream(i):
        r = server.post("/v1/chat/completions", {"messages": questions[i], "max_tokens": 16, "temperature": 0,
                                                 "ignore_eos": True, "chat_template_kwargs": NO_THINKING,
                                                 "stream": True, "stream_options": {"include_usage": True}},
                        stream=True)
        r.encoding = "utf-8"
        text, finish, usage = "", None, None
        for line in r.iter_lines(decode_unicode=True):
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for c in chunk["choices"]:
                text += c["delta"].get("content") or ""
                finish = c.get("finish_reason") or finish
            usage = chunk.get("usage") or usage
        results[i] = (text, finish, usage)

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for text, finish, usage in results:
        assert text and finish == "length", (text, finish)
        assert usage["completion_tokens"] == 16, usage
