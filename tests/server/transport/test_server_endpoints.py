"""Every endpoint, response shapes, usage, determinism, length and stop."""

import json

PROMPT = "Once upon a time, there was a little girl named Lily."


def complete(server, **body):
    body.setdefault("prompt", PROMPT)
    body.setdefault("temperature", 0)
    r = server.post("/v1/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def chat(server, **body):
    body.setdefault("messages", [{"role": "user", "content": "Tell me a story about a cat."}])
    body.setdefault("temperature", 0)
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def check_usage(usage):
    assert isinstance(usage["prompt_tokens"], int) and usage["prompt_tokens"] > 0
    assert isinstance(usage["completion_tokens"], int) and usage["completion_tokens"] >= 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_health(server):
    r = server.get("/health")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}
    assert server.get("/v1/health").status_code == 200


def test_models(server):
    for path in ("/v1/models", "/models"):
        r = server.get(path)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "list"
        assert len(body["data"]) == 1
        m = body["data"][0]
        assert m["id"] == "stories"
        assert m["object"] == "model"
        assert isinstance(m["created"], int)
        assert m["meta"]["n_vocab"] == 512


def test_completion_shape(server):
    body = complete(server, max_tokens=8)
    assert body["id"].startswith("cmpl-")
    assert body["object"] == "text_completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "stories"
    assert len(body["choices"]) == 1
    c = body["choices"][0]
    assert c["index"] == 0
    assert isinstance(c["text"], str) and c["text"]
    assert c["finish_reason"] in ("stop", "length")
    check_usage(body["usage"])
    assert body["usage"]["completion_tokens"] <= 8


def test_completion_echoes_request_model(server):
    body = complete(server, max_tokens=2, model="gpt-3.5-turbo-instruct")
    assert body["model"] == "gpt-3.5-turbo-instruct"


def test_completions_without_v1_answers_in_llama_servers_shape(server):
    r = server.post("/completions", {"prompt": PROMPT, "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["stop"] is True and "content" in r.json()


def test_chat_shape(server):
    body = chat(server, max_tokens=8)
    assert body["id"].startswith("chatcmpl-")
    assert body["object"] == "chat.completion"
    assert isinstance(body["created"], int)
    assert body["model"] == "stories"
    c = body["choices"][0]
    assert c["index"] == 0
    assert c["message"]["role"] == "assistant"
    assert isinstance(c["message"]["content"], str)
    assert c["finish_reason"] in ("stop", "length")
    check_usage(body["usage"])


def test_chat_alias_route_and_content_parts(server):
    r = server.post("/chat/completions", {
        "messages": [
            {"role": "system", "content": "You tell stories."},
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "A story"}, {"type": "text", "text": "please"}]},
            {"role": "assistant", "content": None},
            {"role": "user", "content": "Go on."},
        ],
        "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["object"] == "chat.completion"


def test_chat_prompt_uses_fallback_template(server):
    # The model has no template: ChatML is used, so the prompt holds more
    # tokens than the bare message.
    content = "Hello there"
    tok = server.post("/tokenize", {"content": content}).json()["tokens"]
    body = chat(server, messages=[{"role": "user", "content": content}], max_tokens=1)
    assert body["usage"]["prompt_tokens"] > len(tok) + 5
    props = server.get("/props").json()
    assert props["chat_template_origin"] == "chatml-fallback"
    assert "im_start" in props["chat_template"]


def test_greedy_is_deterministic(server):
    # A prompt the slot holds whole is answered after decoding its last token
    # again, alone, which ggml's matrix kernels may round differently from
    # the prompt's batch (llama-server documents the same of cache_prompt):
    # the cache is off here, and each answer is computed from its prompt.
    a = complete(server, max_tokens=24, cache_prompt=False)
    b = complete(server, max_tokens=24, cache_prompt=False)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    c = chat(server, max_tokens=16, cache_prompt=False)
    d = chat(server, max_tokens=16, cache_prompt=False)
    assert c["choices"][0]["message"]["content"] == d["choices"][0]["message"]["content"]


def test_seeded_sampling_is_reproducible(server):
    a = complete(server, max_tokens=16, temperature=1.0, seed=1234)
    b = complete(server, max_tokens=16, temperature=1.0, seed=1234)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]


def test_max_tokens_is_honoured(server):
    for n in (1, 5, 17):
        body = complete(server, max_tokens=n, ignore_eos=True)
        assert body["usage"]["completion_tokens"] == n
        assert body["choices"][0]["finish_reason"] == "length"
    body = chat(server, max_completion_tokens=3, ignore_eos=True)
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"


def test_length_without_ignore_eos(server):
    body = complete(server, max_tokens=6)
    c = body["choices"][0]
    if c["finish_reason"] == "length":
        assert body["usage"]["completion_tokens"] == 6
    else:
        assert body["usage"]["completion_tokens"] <= 6


def test_max_tokens_capped_by_context(server):
    # 512 positions per slot: a huge max_tokens ends at the context limit.
    body = complete(server, max_tokens=100000, ignore_eos=True)
    u = body["usage"]
    assert body["choices"][0]["finish_reason"] == "length"
    assert u["prompt_tokens"] + u["completion_tokens"] == 512


def test_stop_strings(server):
    full = complete(server, max_tokens=40, ignore_eos=True)["choices"][0]["text"]
    words = full.split()
    assert len(words) > 6, full
    # A word from the middle: the output must end right before its first
    # occurrence, and the stop string itself must not appear.
    stop = " " + words[5]
    cut = full.index(stop)
    body = complete(server, max_tokens=40, ignore_eos=True, stop=[stop, "zzzzqqq"])
    text = body["choices"][0]["text"]
    assert text == full[:cut]
    assert body["choices"][0]["finish_reason"] == "stop"
    # A plain string works too, and a stop string that never appears changes nothing.
    body = complete(server, max_tokens=40, ignore_eos=True, stop=stop)
    assert body["choices"][0]["text"] == full[:cut]
    body = complete(server, max_tokens=40, ignore_eos=True, stop="qqqzzz")
    assert body["choices"][0]["text"] == full
    assert body["choices"][0]["finish_reason"] == "length"


def test_stop_string_inside_a_token(server):
    # A stop string that ends in the middle of a token's text still cuts there.
    full = complete(server, max_tokens=40, ignore_eos=True)["choices"][0]["text"]
    words = [w for w in full.split() if len(w) >= 4]
    assert words, full
    w = words[len(words) // 2]
    stop = w[:2]
    cut = full.index(stop)
    body = complete(server, max_tokens=40, ignore_eos=True, stop=[stop])
    assert body["choices"][0]["text"] == full[:cut]
    assert stop not in body["choices"][0]["text"]


def test_prompt_as_token_ids(server):
    tokens = server.post("/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    assert tokens and all(isinstance(t, int) for t in tokens)
    a = complete(server, prompt=tokens, max_tokens=12, ignore_eos=True)
    b = complete(server, prompt=PROMPT, max_tokens=12, ignore_eos=True)
    assert a["usage"]["prompt_tokens"] == len(tokens)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    c = complete(server, prompt=[tokens], max_tokens=12, ignore_eos=True)
    assert c["choices"][0]["text"] == b["choices"][0]["text"]


def test_tokenize_detokenize(server):
    tokens = server.post("/tokenize", {"content": "Hello world"}).json()["tokens"]
    r = server.post("/detokenize", {"tokens": tokens})
    assert r.status_code == 200
    assert r.json()["content"].strip() == "Hello world"


def test_props(server):
    p = server.get("/props").json()
    assert p["total_slots"] == 4
    assert p["n_ctx"] == 2048
    assert p["n_ctx_slot"] == 512


def test_unknown_fields_are_ignored(server):
    r = server.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "frequency_penalty": 0.5, "presence_penalty": 0.5, "top_k": 10, "top_p": 0.9, "min_p": 0.1,
        "logit_bias": {}, "user": "someone", "n": 1, "stream": False, "tools": [], "tool_choice": "none",
        "some_future_field": {"x": [1, 2]}, "another": None, "logprobs": False, "store": False,
        "response_format": {"type": "text"}, "parallel_tool_calls": True, "metadata": {"a": "b"}})
    assert r.status_code == 200, r.text


def test_logprobs(server):
    body = complete(server, max_tokens=4, ignore_eos=True, logprobs=2)
    lp = body["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 4 and len(lp["token_logprobs"]) == 4
    assert all(x <= 0 for x in lp["token_logprobs"])
    assert all(len(t) == 2 for t in lp["top_logprobs"])
    body = chat(server, max_tokens=3, ignore_eos=True, logprobs=True, top_logprobs=3)
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    assert all(len(c["top_logprobs"]) == 3 for c in content)


def test_json_response_format(server):
    body = chat(server, max_tokens=40, response_format={"type": "json_object"})
    text = body["choices"][0]["message"]["content"]
    if body["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert text.lstrip().startswith("{")


def test_prompt_cache_reuse(server):
    body = dict(prompt=PROMPT + " She liked to sing songs with her mom.", max_tokens=6, ignore_eos=True)
    a = complete(server, **body)
    b = complete(server, **body)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    n = b["usage"]["prompt_tokens"]
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1
    assert b["timings"]["prompt_n"] == 1


def test_cache_prompt_false_decodes_the_whole_prompt(server):
    body = dict(prompt=PROMPT + " The cat sat by the warm fire.", max_tokens=6, ignore_eos=True)
    a = complete(server, **body)
    b = complete(server, cache_prompt=False, **body)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    n = b["usage"]["prompt_tokens"]
    assert b["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert b["timings"]["prompt_n"] == n
    # The default reuses the cache again afterwards.
    c = complete(server, **body)
    assert c["usage"]["prompt_tokens_details"]["cached_tokens"] == n - 1
