"""Reasoning models: thinking goes to reasoning_content (whole and in stream
deltas), --reasoning-format and the request's reasoning_format, thinking
switched off by --reasoning / chat_template_kwargs / reasoning_effort,
reasoning given back in history, a trailing assistant message continued
(prefill), the reasoning budget, and thinking ended while it runs
(reasoning_control, /v1/chat/completions/control). The tiny model is made to "think" by a grammar."""

import json

import pytest

from server_harness import TEMPLATES, ServerProcess, assert_error

TEMPLATE = TEMPLATES / "thinking.jinja"
THOUGHT = "<think>\nI plan.\n</think>\n\nThe answer."
GRAMMAR = 'root ::= "' + THOUGHT.replace("\n", "\\n") + '"'
USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def thinker():
    s = ServerProcess("-np", "2", "-c", "2048", "-t", "1", "--chat-template-file", str(TEMPLATE))
    yield s
    assert s.stop() == 0


def chat(server, **body):
    body.setdefault("messages", USER)
    body.setdefault("max_tokens", 48)
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]


def prompt_of(server, **body):
    body.setdefault("messages", USER)
    r = server.post("/apply-template", body)
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


def test_thinking_goes_to_reasoning_content(thinker):
    m = chat(thinker, grammar=GRAMMAR)
    assert m["content"] == "The answer."
    assert m["reasoning_content"].strip() == "I plan."


def test_stream_sends_reasoning_deltas_first(thinker):
    r = thinker.post("/v1/chat/completions", {"messages": USER, "max_tokens": 48, "grammar": GRAMMAR,
                                              "stream": True}, stream=True)
    reasoning, content, order = "", "", []
    for line in r.iter_lines(decode_unicode=True):
        if not line or line == "data: [DONE]":
            continue
        delta = json.loads(line[6:])["choices"][0]["delta"] if json.loads(line[6:])["choices"] else {}
        if delta.get("reasoning_content"):
            reasoning += delta["reasoning_content"]
            order.append("r")
        if delta.get("content"):
            content += delta["content"]
            order.append("c")
    assert reasoning.strip() == "I plan." and content == "The answer."
    assert order.index("c") > max(i for i, k in enumerate(order) if k == "r")


def test_reasoning_format_none_leaves_thinking_in_content(thinker):
    m = chat(thinker, grammar=GRAMMAR, reasoning_format="none")
    assert m["content"] == THOUGHT and "reasoning_content" not in m
    s = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", str(TEMPLATE), "--reasoning-format", "none")
    try:
        m = chat(s, grammar=GRAMMAR)
        assert m["content"] == THOUGHT
    finally:
        assert s.stop() == 0


def test_thinking_switched_off(thinker):
    empty = "<think>\n\n</think>"
    assert empty not in prompt_of(thinker)
    assert prompt_of(thinker, chat_template_kwargs={"enable_thinking": False}).endswith(empty + "\n\n")
    assert prompt_of(thinker, reasoning_effort="none").endswith(empty + "\n\n")
    for flags in (["--reasoning", "off"], ["--chat-template-kwargs", '{"enable_thinking": false}'],
                  ["--reasoning-budget", "0"]):
        s = ServerProcess("-np", "1", "-t", "1", "--chat-template-file", str(TEMPLATE), *flags)
        try:
            assert prompt_of(s).endswith(empty + "\n\n"), flags
            # The request can turn it back on.
            assert empty not in prompt_of(s, chat_template_kwargs={"enable_thinking": True}), flags
        finally:
            assert s.stop() == 0


def test_reasoning_in_history_is_rendered(thinker):
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": "ok", "reasoning_content": "earlier thought"},
               {"role": "user", "content": "more"}]
    p = prompt_of(thinker, messages=history)
    assert "<think>\nearlier thought\n</think>" in p


def test_trailing_assistant_message_is_continued(thinker):
    msgs = USER + [{"role": "assistant", "content": "Once upon a"}]
    p = prompt_of(thinker, messages=msgs)
    assert p.endswith("Once upon a"), p
    # The reply is what the model writes after the prefill, as for the raw prompt.
    m = chat(thinker, messages=msgs, temperature=0, max_tokens=8, reasoning_format="none")
    raw = thinker.post("/completion", {"prompt": p, "n_predict": 8, "temperature": 0}).json()["content"]
    assert m["content"] == raw
    # Not with continue_final_message false: a new assistant turn follows.
    p2 = prompt_of(thinker, messages=msgs, continue_final_message=False)
    assert p2.rstrip().endswith("<|im_start|>assistant"), p2


# A template that opens the thinking block in the generation prompt, and
# thinking that would not end: words until the tokens run out, unless the
# budget forces the end tag; the answer follows it.
OPEN_TEMPLATE = TEMPLATES / "thinking_open.jinja"
OPEN_THOUGHT = 'root ::= [a-zA-Z .]* "</think>\\n\\nThe answer."'


@pytest.fixture(scope="module")
def open_thinker():
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1", "--chat-template-file", str(OPEN_TEMPLATE))
    yield s
    assert s.stop() == 0


def test_reasoning_budget_forces_the_end_of_thinking(open_thinker):
    m = chat(open_thinker, grammar=OPEN_THOUGHT, max_tokens=64, reasoning_budget_tokens=6,
             reasoning_budget_message=" Enough.")
    assert m["content"] == "The answer.", m
    # The budget's tokens of thinking, then the message before the end tag.
    thought = m["reasoning_content"].strip()
    assert thought.endswith("Enough."), m
    n = len(open_thinker.post("/tokenize", {"content": thought[:-len("Enough.")]}).json()["tokens"])
    assert 1 <= n <= 8, m
    # thinking_budget_tokens is the same field.
    m = chat(open_thinker, grammar=OPEN_THOUGHT, max_tokens=64, thinking_budget_tokens=3)
    assert m["content"] == "The answer.", m
    # Without a budget the thinking runs on to the end of the tokens.
    unbounded = chat(open_thinker, grammar=OPEN_THOUGHT, max_tokens=24)
    assert not unbounded.get("content"), unbounded


def test_server_reasoning_budget():
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1", "--chat-template-file", str(OPEN_TEMPLATE),
                      "--reasoning-budget", "4", "--reasoning-budget-message", " Stop.")
    try:
        m = chat(s, grammar=OPEN_THOUGHT, max_tokens=64)
        assert m["content"] == "The answer.", m
        assert m["reasoning_content"].strip().endswith("Stop."), m
        assert "no effect" not in s.log_text()
    finally:
        assert s.stop() == 0


def stream_with_control(server, control_body=None, **body):
    """Streams a chat completion whose thinking would not end; after its
    first thinking delta, POSTs /v1/chat/completions/control with the
    stream's id (and control_body). Returns the control's answer, the
    thinking and the content."""
    body = {"messages": USER, "grammar": OPEN_THOUGHT, "max_tokens": 900, "stream": True, **body}
    r = server.post("/v1/chat/completions", body, stream=True)
    assert r.status_code == 200, r.text
    answer, thinking, content = None, "", ""
    for line in r.iter_lines(decode_unicode=True):
        if not line or not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk["choices"]:
            thinking += choice["delta"].get("reasoning_content") or ""
            content += choice["delta"].get("content") or ""
        if answer is None and thinking:
            c = server.post("/v1/chat/completions/control",
                            {"id": chunk["id"], "action": "reasoning_end", **(control_body or {})})
            assert c.status_code == 200, c.text
            answer = c.json()
    return answer, thinking, content


def test_control_ends_the_thinking_of_a_running_completion(open_thinker):
    answer, thinking, content = stream_with_control(open_thinker, reasoning_control=True)
    assert answer == {"success": True}
    # The end tag came while the words would have run on to the token limit.
    assert content == "The answer.", (thinking, content)
    n = len(open_thinker.post("/tokenize", {"content": thinking}).json()["tokens"])
    assert 1 <= n < 450, thinking
    # Without reasoning_control the completion is not armed: it thinks on.
    answer, thinking, content = stream_with_control(open_thinker, max_tokens=200)
    assert answer == {"success": False, "message": "reasoning control not enabled for this completion"}
    assert content == ""


def test_control_requests_that_match_nothing_or_are_malformed(open_thinker):
    r = open_thinker.post("/v1/chat/completions/control", {"id": "chatcmpl-gone", "action": "reasoning_end"})
    assert r.status_code == 200 and r.json() == {"success": False, "message": "no active completion for this id"}
    assert_error(open_thinker.post("/v1/chat/completions/control", {"action": "reasoning_end"}), 400, "id")
    assert_error(open_thinker.post("/v1/chat/completions/control", {"id": "x", "action": "stop"}), 400, "action")
    assert_error(open_thinker.post("/v1/chat/completions/control", {"id": 5, "action": "reasoning_end"}), 400, "id")


@pytest.mark.parametrize("field,value", [
    ("reasoning_format", "bogus"), ("chat_template_kwargs", 5), ("continue_final_message", "yes"),
    ("reasoning_budget_tokens", -2), ("reasoning_budget_tokens", "x"),
])
def test_bad_reasoning_fields(thinker, field, value):
    assert_error(thinker.post("/v1/chat/completions", {"messages": USER, field: value}), 400, param=field)


def test_enable_thinking_must_be_a_boolean(thinker):
    r = thinker.post("/v1/chat/completions", {"messages": USER, "chat_template_kwargs": {"enable_thinking": "no"}})
    assert_error(r, 400, param="chat_template_kwargs.enable_thinking")
