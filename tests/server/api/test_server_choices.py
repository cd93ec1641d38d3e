"""n > 1: several answers to one prompt (OpenAI's n, llama-server's n_cmpl),
whole and streamed, each choice sampled on its own."""

import json

from server_harness import ServerProcess, assert_error

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


def prompt_tokens_decoded(s):
    text = s.get("/metrics").text
    return float(next(l.split()[1] for l in text.splitlines() if l.startswith("llamacpp:prompt_tokens_total")))


def test_choices_compute_the_prompt_once():
    # The first choice computes the prompt; the others wait for it, copy its
    # cells and decode only the last prompt token for their own logits.
    s = ServerProcess("-np", "4", "-c", "2048", "--metrics")
    try:
        prompt = "Once upon a time there was a little dog who liked to run in the park every day. " * 3
        n = len(s.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"])
        before = prompt_tokens_decoded(s)
        r = s.post("/v1/completions", {"prompt": prompt, "max_tokens": 4, "n": 3, "temperature": 1.0, "seed": 3,
                                       "ignore_eos": True})
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"]) == 3
        assert prompt_tokens_decoded(s) - before == n + 2
        # Without the prompt cache every choice computes its prompt.
        before = prompt_tokens_decoded(s)
        r = s.post("/v1/completions", {"prompt": "A " + prompt, "max_tokens": 2, "n": 2, "cache_prompt": False})
        assert r.status_code == 200, r.text
        assert prompt_tokens_decoded(s) - before >= 2 * n
    finally:
        assert s.stop() == 0


def test_a_prompt_another_slot_holds_is_copied_from_it():
    s = ServerProcess("-np", "2", "-c", "2048", "--metrics")
    try:
        prompt = "The sun was shining and the birds were singing in the tall green trees. " * 3
        first = s.post("/completion", {"prompt": prompt, "n_predict": 4, "id_slot": 0, "temperature": 0})
        assert first.status_code == 200, first.text
        before = prompt_tokens_decoded(s)
        # Slot 1 has never seen it: it copies slot 0's cells.
        again = s.post("/completion", {"prompt": prompt, "n_predict": 4, "id_slot": 1, "temperature": 0})
        assert again.status_code == 200, again.text
        assert prompt_tokens_decoded(s) - before == 1
        assert again.json()["tokens_cached"] >= first.json()["tokens_evaluated"] - 1
    finally:
        assert s.stop() == 0
