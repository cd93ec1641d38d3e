"""n > 1: several answers to one prompt (OpenAI's n, llama-server's n_cmpl),
whole and streamed, each choice sampled on its own."""

import json

from server_harness import assert_error

PROMPT = "Once upon a time"


def test_completion_choices(server):
    r = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "n": 3, "temperature": 1.0, "seed": 5,
                                        "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    assert body["usage"]["completion_tokens"] == 18
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 18
    texts = [c["text"] for c in body["choices"]]
    assert len(set(texts)) > 1, texts  # a fixed seed still gives each choice its own
    # The same request gives the same choices.
    again = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "n": 3, "temperature": 1.0,
                                            "seed": 5, "ignore_eos": True}).json()
    assert [c["text"] for c in again["choices"]] == texts
    # Greedy: every choice is the greedy answer.
    greedy = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "n": 2, "temperature": 0,
                                             "ignore_eos": True}).json()
    assert greedy["choices"][0]["text"] == greedy["choices"][1]["text"]


def test_chat_choices_streamed(server):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                                             "n": 2, "stream": True, "stream_options": {"include_usage": True},
                                             "ignore_eos": True}, stream=True)
    assert r.status_code == 200
    text = {0: "", 1: ""}
    finished, usage, done = set(), None, 0
    for line in r.iter_lines(decode_unicode=True):
        if not line:
            continue
        if line == "data: [DONE]":
            done += 1
            continue
        chunk = json.loads(line[6:])
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk["choices"]:
            text[c["index"]] += c["delta"].get("content") or ""
            if c["finish_reason"]:
                finished.add(c["index"])
    assert done == 1 and finished == {0, 1}
    assert usage["completion_tokens"] == 10


def test_native_n_cmpl_answers_an_array(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 4, "n_cmpl": 2, "ignore_eos": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body, list) and [b["index"] for b in body] == [0, 1]
    assert all(b["tokens_predicted"] == 4 for b in body)


def test_n_is_not_a_messages_field(server):
    r = server.post("/v1/messages", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "n": 2})
    assert_error(r, 400, param="n")
