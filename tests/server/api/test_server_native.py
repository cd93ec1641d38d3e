"""llama-server's own endpoints and shapes: /completion (and /completions),
/apply-template, /tokenize with pieces, /slots, /props, endpoint switches,
--api-prefix and its error types."""

import json
import math
import re
import threading
import time

import requests

from server_harness import ServerProcess, assert_error, sse_events

PROMPT = "Once upon a time"


def native(server, **body):
    body.setdefault("prompt", PROMPT)
    r = server.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_completion_shape_and_same_text_as_openai_route(server):
    body = native(server, n_predict=8, temperature=0, ignore_eos=True)
    for k in ("index", "content", "tokens", "id_slot", "stop", "model", "tokens_predicted", "tokens_evaluated",
              "generation_settings", "prompt", "has_new_line", "truncated", "stop_type", "stopping_word",
              "tokens_cached", "timings"):
        assert k in body, k
    assert body["stop"] is True
    assert body["stop_type"] == "limit"
    assert body["tokens_predicted"] == 8
    assert body["tokens"] == []  # only with return_tokens
    assert body["prompt"] == PROMPT
    assert body["model"] == "stories"
    assert 0 <= body["id_slot"] < 4
    assert body["generation_settings"]["n_predict"] == 8
    assert body["generation_settings"]["temperature"] == 0
    assert body["timings"]["predicted_n"] == 8
    oai = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0,
                                          "ignore_eos": True}).json()
    assert oai["choices"][0]["text"] == body["content"]
    assert body["tokens_evaluated"] == oai["usage"]["prompt_tokens"]


def test_prompt_as_llama_servers_object(server):
    """{"prompt_string": ...}: the same text as the plain string, alone or in a one-element array."""
    plain = native(server, n_predict=6, temperature=0, ignore_eos=True)
    for prompt in ({"prompt_string": PROMPT}, [{"prompt_string": PROMPT, "multimodal_data": []}]):
        got = native(server, prompt=prompt, n_predict=6, temperature=0, ignore_eos=True)
        assert got["content"] == plain["content"] and got["prompt"] == PROMPT, got
    # Media needs a multimodal model; a wrong-typed or missing string names the field.
    r = server.post("/completion", {"prompt": {"prompt_string": PROMPT, "multimodal_data": ["aGk="]}})
    assert_error(r, 400, param="prompt")
    assert "multimodal" in r.json()["error"]["message"]
    r = server.post("/completion", {"prompt": {"prompt_string": 5}})
    assert_error(r, 400)
    assert "prompt.prompt_string" in r.json()["error"]["message"], r.text
    assert_error(server.post("/completion", {"prompt": {"text": PROMPT}}), 400, param="prompt")


def test_several_prompts_in_one_request(server):
    """As llama-server: one answer per prompt, in order, each as that prompt alone would get it."""
    prompts = [PROMPT, "The little dog", [1, 45, 217]]
    alone = [native(server, prompt=p, n_predict=5, temperature=0, ignore_eos=True) for p in prompts]
    r = server.post("/completion", {"prompt": prompts, "n_predict": 5, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    got = r.json()
    assert isinstance(got, list) and len(got) == 3, got
    for k, (g, a) in enumerate(zip(got, alone)):
        assert g["index"] == k and g["content"] == a["content"] and g["prompt"] == a["prompt"], (k, g, a)
    # Streamed: every event names its prompt, and each prompt's text is the same.
    r = server.post("/completion", {"prompt": prompts, "n_predict": 5, "temperature": 0, "ignore_eos": True,
                                    "stream": True}, stream=True)
    assert r.status_code == 200, r.text
    texts = ["", "", ""]
    for e in sse_events(r):
        if e != "[DONE]":
            ev = json.loads(e)
            texts[ev["index"]] += ev["content"]
    assert texts == [a["content"] for a in alone]
    # OpenAI's route: one choice per prompt, index k.
    oai = server.post("/v1/completions", {"prompt": prompts[:2], "max_tokens": 5, "temperature": 0,
                                          "ignore_eos": True}).json()
    assert [c["index"] for c in oai["choices"]] == [0, 1], oai
    assert [c["text"] for c in oai["choices"]] == [a["content"] for a in alone[:2]]
    # More answers than the slots and the queue hold at once: refused whole, nothing runs.
    r = server.post("/completion", {"prompt": ["a"] * 500, "n_predict": 1})
    assert_error(r, 400, param="prompt")
    assert "500 prompts" in r.json()["error"]["message"], r.text


def test_completions_route_is_the_native_shape(server):
    r = server.post("/completions", {"prompt": PROMPT, "n_predict": 3, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["stop"] is True and "choices" not in r.json()


def test_return_tokens_detokenize_to_the_content(server):
    body = native(server, n_predict=10, temperature=0, ignore_eos=True, return_tokens=True)
    assert len(body["tokens"]) == 10
    text = server.post("/detokenize", {"tokens": body["tokens"]}).json()["content"]
    assert text == body["content"]


def test_stop_word_and_eos_stop_types(server):
    full = native(server, n_predict=24, temperature=0, ignore_eos=True)["content"]
    words = full.split()
    assert len(words) > 3, full
    stop = " " + words[2]
    body = native(server, n_predict=24, temperature=0, ignore_eos=True, stop=[stop])
    assert body["stop_type"] == "word"
    assert body["stopping_word"] == stop
    assert body["content"] == full[:full.index(stop)]
    # The tiny model starts a new story with BOS rather than ending with EOS:
    # a logit bias makes EOS (token 2) the first choice.
    body = native(server, n_predict=24, temperature=0, logit_bias=[[2, 100.0]])
    assert body["stop_type"] == "eos" and body["content"] == "" and body["tokens_predicted"] == 1


def test_special_shows_the_end_of_generation_token():
    # Token 2 is stories260K's </s>: a bias makes it the first one sampled.
    body = {"n_predict": 4, "temperature": 0, "logit_bias": [[2, 100]], "n_probs": 1}
    plain = ServerProcess("-np", "1", "-c", "256", "-t", "1")
    try:
        hidden = native(plain, **body)
    finally:
        assert plain.stop() == 0
    assert hidden["stop_type"] == "eos" and hidden["content"] == ""
    special = ServerProcess("-np", "1", "-c", "256", "-t", "1", "-sp")
    try:
        shown = native(special, **body)
    finally:
        assert special.stop() == 0
    assert shown["stop_type"] == "eos" and shown["content"] == "</s>"
    assert shown["completion_probabilities"][0]["token"] == "</s>"


def test_logit_bias_shapes(server):
    base = native(server, n_predict=6, temperature=0, ignore_eos=True, return_tokens=True)
    first = base["tokens"][0]
    # OpenAI's object, with false / a large negative bias banning the greedy token.
    for lb in ({str(first): -100}, [[first, False]]):
        body = native(server, n_predict=6, temperature=0, ignore_eos=True, return_tokens=True, logit_bias=lb)
        assert first not in body["tokens"], (lb, body["tokens"])
    # Text names its tokens.
    piece = server.post("/detokenize", {"tokens": [first]}).json()["content"]
    body = native(server, n_predict=6, temperature=0, ignore_eos=True, return_tokens=True,
                  logit_bias=[[piece, False]])
    assert body["tokens"][0] != first


def test_n_probs(server):
    body = native(server, n_predict=4, temperature=0, ignore_eos=True, n_probs=3)
    probs = body["completion_probabilities"]
    assert len(probs) == 4
    for p in probs:
        assert set(p) >= {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert len(p["top_logprobs"]) == 3
        # Greedy: the chosen token is the most likely one.
        assert p["top_logprobs"][0]["id"] == p["id"]
        assert p["logprob"] <= 0
    assert "".join(p["token"] for p in probs) == body["content"]


def test_post_sampling_probs(server):
    """llama-server's probabilities after the sampler chain: what its last stage gave the candidates kept."""
    # Greedy: the chosen token holds all of it, the text unchanged.
    plain = native(server, n_predict=4, temperature=0, ignore_eos=True, n_probs=3)
    body = native(server, n_predict=4, temperature=0, ignore_eos=True, n_probs=3, post_sampling_probs=True)
    assert body["content"] == plain["content"]
    for p in body["completion_probabilities"]:
        assert "logprob" not in p and "top_logprobs" not in p
        assert p["prob"] == 1.0 and [(t["id"], t["prob"]) for t in p["top_probs"]] == [(p["id"], 1.0)]
    # Sampling from the top 3: the raw top 3 renormalised, the same draws under one seed.
    sampling = {"n_predict": 6, "temperature": 1, "top_k": 3, "top_p": 1, "min_p": 0, "seed": 5, "ignore_eos": True}
    raw = native(server, n_probs=3, **sampling)["completion_probabilities"]
    post = native(server, n_probs=5, post_sampling_probs=True, **sampling)["completion_probabilities"]
    assert [p["id"] for p in post] == [p["id"] for p in raw]
    for r, p in zip(raw, post):
        assert [t["id"] for t in p["top_probs"]] == [t["id"] for t in r["top_logprobs"]]
        total = sum(math.exp(t["logprob"]) for t in r["top_logprobs"])
        for t, q in zip(r["top_logprobs"], p["top_probs"]):
            assert abs(q["prob"] - math.exp(t["logprob"]) / total) < 1e-4, (r, p)
        assert p["prob"] == next(t["prob"] for t in p["top_probs"] if t["id"] == p["id"])
    # The chat endpoint's logprobs likewise; OpenAI's completion shape has no place for them.
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
                                             "temperature": 0, "logprobs": True, "top_logprobs": 2,
                                             "post_sampling_probs": True})
    assert r.status_code == 200, r.text
    for c in r.json()["choices"][0]["logprobs"]["content"]:
        assert c["prob"] == 1.0 and len(c["top_probs"]) == 1 and "logprob" not in c
    r = server.post("/v1/completions", {"prompt": PROMPT, "max_tokens": 2, "logprobs": 2, "post_sampling_probs": True})
    assert_error(r, 400, param="post_sampling_probs")


def test_native_stream(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "ignore_eos": True,
                                    "stream": True, "return_tokens": True}, stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/event-stream")
    events = []
    for line in r.iter_lines(decode_unicode=True):
        if line:
            assert line.startswith("data: "), line
            assert line != "data: [DONE]"  # llama-server's native stream has no [DONE]
            events.append(json.loads(line[6:]))
    assert events[-1]["stop"] is True and events[-1]["stop_type"] == "limit"
    assert all(e["stop"] is False for e in events[:-1])
    text = "".join(e["content"] for e in events)
    tokens = [t for e in events for t in e["tokens"]]
    assert len(tokens) == 12
    blocking = native(server, n_predict=12, temperature=0, ignore_eos=True)
    assert text == blocking["content"]
    assert events[-2]["tokens_predicted"] == 12


def test_apply_template(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
    r = server.post("/apply-template", {"messages": messages})
    assert r.status_code == 200, r.text
    prompt = r.json()["prompt"]
    assert "Be brief." in prompt and "Hi there" in prompt
    n = len(server.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"])
    chat = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == n
    assert_error(server.post("/apply-template", {"messages": "no"}), 400, param="messages")


def test_tokenize_with_pieces(server):
    r = server.post("/tokenize", {"content": "Once upon a time", "with_pieces": True})
    assert r.status_code == 200, r.text
    toks = r.json()["tokens"]
    assert all(set(t) == {"id", "piece"} for t in toks)
    plain = server.post("/tokenize", {"content": "Once upon a time"}).json()["tokens"]
    assert [t["id"] for t in toks] == plain
    assert "".join(t["piece"] for t in toks).strip() == "Once upon a time"
    assert_error(server.post("/tokenize", {"content": "x", "with_pieces": "yes"}), 400, param="with_pieces")


def test_props_shape(server):
    p = server.get("/props").json()
    for k in ("default_generation_settings", "total_slots", "model_alias", "model_path", "model_ftype",
              "modalities", "media_marker", "endpoint_slots", "endpoint_props", "endpoint_metrics", "ui",
              "ui_settings", "chat_template", "chat_template_caps", "bos_token", "eos_token", "build_info",
              "is_sleeping", "cors_proxy_enabled"):
        assert k in p, k
    # stories260K says no file type: llama-server's guess from its tensors, under llama-server's name
    assert p["model_ftype"] == "(guessed) all F32", p["model_ftype"]
    assert re.fullmatch(r"b[0-9]+-([0-9a-f]{7,}|unknown)", p["build_info"]), p["build_info"]
    assert p["ui"] is False and p["cors_proxy_enabled"] is False and p["ui_settings"] == {}
    caps = p["chat_template_caps"]
    assert caps and all(isinstance(v, bool) for v in caps.values()), caps
    assert p["endpoint_metrics"] is True and p["endpoint_slots"] is True and p["endpoint_props"] is False
    assert p["default_generation_settings"]["n_ctx"] == 512
    assert p["total_slots"] == 4
    assert_error(server.post("/props", {}), 501)
    assert server.post("/props", {}).json()["error"]["type"] == "not_supported_error"


def test_slots_while_one_generates():
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "1")
    try:
        slots = s.get("/slots").json()
        assert len(slots) == 1 and slots[0]["id"] == 0 and slots[0]["is_processing"] is False
        assert s.get("/slots?fail_on_no_slot=1").status_code == 200
        done = threading.Event()

        def long_one():
            s.post("/completion", {"prompt": PROMPT, "n_predict": 1500, "ignore_eos": True})
            done.set()

        t = threading.Thread(target=long_one)
        t.start()
        deadline = time.time() + 20
        busy = None
        while time.time() < deadline and not done.is_set():
            slots = s.get("/slots").json()
            if slots[0]["is_processing"]:
                busy = slots[0]
                break
            time.sleep(0.01)
        assert busy is not None, "the slot never showed as processing"
        assert busy["id_task"] >= 1 and busy["params"]["n_predict"] == 1500
        # The task's whole generation settings, as llama-server shows them.
        assert busy["params"]["ignore_eos"] is True and "temperature" in busy["params"], busy["params"]
        assert busy["next_token"][0]["n_decoded"] + busy["next_token"][0]["n_remain"] == 1500
        assert busy["next_token"][0]["has_next_token"] is True
        if not done.is_set():
            r = s.get("/slots?fail_on_no_slot=1")
            assert r.status_code == 503 or done.is_set(), r.text
        t.join(timeout=120)
        # Idle again: the last task's figures stay, as llama-server's.
        idle = s.get("/slots").json()[0]
        assert idle["is_processing"] is False and idle["id_task"] == busy["id_task"], idle
        assert idle["next_token"][0]["has_next_token"] is False and idle["next_token"][0]["n_decoded"] == 1500
        assert idle["n_prompt_tokens_processed"] + idle["n_prompt_tokens_cache"] == idle["n_prompt_tokens"]
        assert idle["n_prompt_tokens_processed"] > 0 and isinstance(idle["next_token"][0]["has_new_line"], bool)
    finally:
        assert s.stop() == 0


def test_endpoint_switches():
    s = ServerProcess("-np", "1", "-t", "1", "--no-slots", "--props")
    try:
        assert_error(s.get("/slots"), 501)
        assert "--slots" in s.get("/slots").json()["error"]["message"]
        assert_error(s.get("/metrics"), 501)
        assert "--metrics" in s.get("/metrics").json()["error"]["message"]
        r = s.post("/props", {})
        assert r.status_code == 200 and r.json() == {"success": True}
        p = s.get("/props").json()
        assert p["endpoint_slots"] is False and p["endpoint_props"] is True and p["endpoint_metrics"] is False
    finally:
        assert s.stop() == 0


def test_api_prefix():
    s = ServerProcess("-np", "1", "-t", "1", "--api-prefix", "/llama", "--metrics", health_path="/llama/health")
    try:
        assert requests.get(s.base + "/llama/health", timeout=10).json() == {"status": "ok"}
        assert s.get("/llama/v1/models").status_code == 200
        assert s.get("/v1/models").status_code == 404
        r = s.post("/llama/completion", {"prompt": PROMPT, "n_predict": 2})
        assert r.status_code == 200, r.text
        assert 'endpoint="/completion"' in s.get("/llama/metrics").text
    finally:
        assert s.stop() == 0


def test_context_overflow_has_llama_servers_error_type(server):
    r = server.post("/completion", {"prompt": "Once upon a time " * 300, "n_predict": 4})
    assert_error(r, 400, param="prompt", code="context_length_exceeded")
    error = r.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    # Both sizes, as llama-server gives them.
    assert error["n_ctx"] == 512 and error["n_prompt_tokens"] > 512, error


def test_every_llama_server_endpoint_answers_or_says_why_not(server):
    implemented = ["/completion", "/completions", "/v1/completions", "/chat/completions", "/v1/chat/completions",
                   "/v1/responses", "/responses", "/v1/messages", "/v1/messages/count_tokens", "/infill",
                   "/tokenize", "/detokenize", "/apply-template", "/chat/completions/input_tokens",
                   "/v1/chat/completions/input_tokens", "/responses/input_tokens", "/v1/responses/input_tokens"]
    for path in implemented:
        r = server.post(path, {})
        assert r.status_code not in (404, 405), (path, r.status_code)
    r = server.post("/v1/audio/transcriptions", {})
    assert_error(r, 501)
    assert "not available in llama-tp-server" in r.json()["error"]["message"]
    # As llama-server without --tools / --webui-mcp-proxy.
    for path in ("/tools", "/cors-proxy"):
        for r in (server.post(path, {}), server.get(path)):
            assert_error(r, 403)
            assert r.json()["error"]["type"] == "feature_disabled", (path, r.text)
            assert r.json()["error"]["message"].startswith("this feature is disabled"), (path, r.text)
    for path, flag in (("/rerank", "--rerank"), ("/v1/rerank", "--rerank"), ("/v1/embeddings", "--embeddings")):
        r = server.post(path, {})
        assert_error(r, 501)  # a mode this server was not started in
        assert flag in r.json()["error"]["message"], path


def test_response_fields(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 3,
                                    "response_fields": ["content", "generation_settings/n_predict", "nope/x"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"content", "generation_settings/n_predict"}
    assert body["generation_settings/n_predict"] == 3


def test_fields_that_would_change_the_answer_are_refused(server):
    for field, value in (("t_max_prompt_ms", 50), ("adaptive_target", 0.5),
                         ("grammar_lazy", True), ("verbose", True), ("grammar_triggers", [{"type": 0, "value": "x"}]),
                         ("preserved_tokens", ["<x>"]), ("chat_format", 2), ("chat_parser", "peg"),
                         ("generation_prompt", "<|assistant|>"), ("parse_tool_calls", True),
                         ("reasoning_budget_start_tag", "<think>"), ("reasoning_budget_end_tags", ["</think>"])):
        r = server.post("/completion", {"prompt": PROMPT, "n_predict": 2, field: value})
        assert_error(r, 400, param=field)
        assert "not supported by llama-tp-server" in r.json()["error"]["message"]
    # Their defaults, and fields upstream ignores here too, pass.
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 2, "post_sampling_probs": False, "lora": [],
                                    "n_keep": 4, "speculative.n_max": 16, "backend_sampling": True,
                                    "n_cache_reuse": 256, "reasoning_budget_tokens": 100})
    assert r.status_code == 200, r.text
    # What llama-server's chat layer hands its raw completion is ignored on chat, as there.
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
                                             "parse_tool_calls": True, "chat_format": 2})
    assert r.status_code == 200, r.text


def test_input_tokens_count_what_a_completion_decodes(server):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}]
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        r = server.post(path, {"messages": messages})
        assert r.status_code == 200, r.text
        assert r.json()["object"] == "response.input_tokens"
        done = server.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1}).json()
        assert r.json()["input_tokens"] == done["usage"]["prompt_tokens"] > 0
    counted = server.post("/v1/responses/input_tokens", {"input": "Tell me a story."}).json()["input_tokens"]
    answered = server.post("/v1/responses", {"input": "Tell me a story.", "max_output_tokens": 1}).json()
    assert counted == answered["usage"]["input_tokens"] > 0
    assert_error(server.post("/v1/chat/completions/input_tokens", {"messages": "not a list"}), 400)
