"""Bad input gets a 4xx with an OpenAI error object; the server keeps serving."""

import pytest

from server_harness import assert_error

C = "/v1/completions"
H = "/v1/chat/completions"
MSG = [{"role": "user", "content": "hi"}]
LONG = "the cat sat on the mat " * 400  # far beyond 512 tokens per slot



def nested_schema(depth):
    """A chat body whose json_schema nests objects `depth` deep, as raw JSON."""
    schema = '{"type":"object","properties":{"a":' * depth + '{"type":"string"}' + "}}" * depth
    return '{"messages":[{"role":"user","content":"hi"}],"max_tokens":1,"json_schema":' + schema + "}"


# (route, body or raw string, expected param or None)
CASES = [
    ("malformed-json", C, "{\"prompt\": \"x\",", None),
    ("number-overflow", C, '{"prompt": "x", "max_tokens": 1e400}', None),
    # Once crashed the server: the schema-to-grammar conversion recursed
    # past the stack.
    ("nesting-too-deep", H, nested_schema(10000), None),
    ("grammar-too-deep", C, {"prompt": "x", "grammar": "root ::= " + "(" * 100000 + '"a"' + ")" * 100000},
     "grammar"),
    ("body-is-array", C, "[1, 2]", None),
    ("body-is-string", H, "\"hello\"", None),
    ("empty-body", C, "", None),
    ("missing-prompt", C, {"max_tokens": 3}, "prompt"),
    ("prompt-number", C, {"prompt": 5}, "prompt"),
    ("prompt-object", C, {"prompt": {"a": 1}}, "prompt"),
    ("prompt-empty-array", C, {"prompt": []}, "prompt"),
    ("prompt-token-out-of-range", C, {"prompt": [1, 999999]}, "prompt"),
    ("prompt-negative-token", C, {"prompt": [1, -5]}, "prompt"),
    ("prompt-several-one-wrong", C, {"prompt": ["a", 5]}, "prompt"),
    ("prompt-too-long", C, {"prompt": LONG}, "prompt"),
    ("temperature-string", C, {"prompt": "x", "temperature": "hot"}, "temperature"),
    ("temperature-negative", C, {"prompt": "x", "temperature": -1}, "temperature"),
    ("top-p-above-one", C, {"prompt": "x", "top_p": 2}, "top_p"),
    ("top-k-string", C, {"prompt": "x", "top_k": "x"}, "top_k"),
    ("top-k-float", C, {"prompt": "x", "top_k": 1.5}, "top_k"),
    ("min-p-negative", C, {"prompt": "x", "min_p": -0.5}, "min_p"),
    ("max-tokens-negative", C, {"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ("max-tokens-zero", C, {"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ("max-tokens-string", C, {"prompt": "x", "max_tokens": "10"}, "max_tokens"),
    ("max-tokens-fraction", C, {"prompt": "x", "max_tokens": 1.5}, "max_tokens"),
    ("max-completion-tokens-bool", H, {"messages": MSG, "max_completion_tokens": True}, "max_completion_tokens"),
    ("stop-number", C, {"prompt": "x", "stop": 5}, "stop"),
    ("stop-array-of-numbers", C, {"prompt": "x", "stop": [1, 2]}, "stop"),
    ("stream-string", C, {"prompt": "x", "stream": "yes"}, "stream"),
    ("stream-options-number", C, {"prompt": "x", "stream": True, "stream_options": 5}, "stream_options"),
    ("seed-string", C, {"prompt": "x", "seed": "abc"}, "seed"),
    ("presence-penalty-range", C, {"prompt": "x", "presence_penalty": 5}, "presence_penalty"),
    ("frequency-penalty-string", C, {"prompt": "x", "frequency_penalty": "a"}, "frequency_penalty"),
    ("n-more-than-slots", C, {"prompt": "x", "n": 99}, "n"),
    ("logit-bias-string-value", C, {"prompt": "x", "logit_bias": {"1": "up"}}, "logit_bias"),
    ("logit-bias-out-of-vocabulary", C, {"prompt": "x", "logit_bias": {"99999999": 5}}, "logit_bias"),
    ("logit-bias-bad-pair", C, {"prompt": "x", "logit_bias": [[1, 2, 3]]}, "logit_bias"),
    ("logit-bias-number", C, {"prompt": "x", "logit_bias": 5}, "logit_bias"),
    ("user-number", C, {"prompt": "x", "user": 5}, "user"),
    ("model-number", C, {"prompt": "x", "model": 7}, "model"),
    ("modalities-string", H, {"messages": MSG, "modalities": "text"}, "modalities"),
    ("metadata-array", H, {"messages": MSG, "metadata": [1]}, "metadata"),
    ("messages-number", H, {"messages": 5}, "messages"),
    ("messages-missing", H, {"max_tokens": 3}, "messages"),
    ("messages-empty", H, {"messages": []}, "messages"),
    ("messages-strings", H, {"messages": ["hi"]}, "messages[0]"),
    ("message-unknown-role", H, {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ("message-no-role", H, {"messages": [{"content": "hi"}]}, "messages[0].role"),
    ("message-role-number", H, {"messages": [{"role": 1, "content": "hi"}]}, "messages[0].role"),
    ("message-content-number", H, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("message-content-missing", H, {"messages": [{"role": "user"}]}, "messages[0].content"),
    ("message-image-part", H, {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]}, "messages[0].content[0].type"),
    ("messages-too-long", H, {"messages": [{"role": "user", "content": LONG}]}, "messages"),
    ("tools-object", H, {"messages": MSG, "tools": {"type": "function"}}, "tools"),
    ("tool-type", H, {"messages": MSG, "tools": [{"type": "code", "function": {"name": "f"}}]}, "tools[0].type"),
    ("tool-function-string", H, {"messages": MSG, "tools": [{"type": "function", "function": "f"}]},
     "tools[0].function"),
    ("tool-name-missing", H, {"messages": MSG, "tools": [{"type": "function", "function": {}}]},
     "tools[0].function.name"),
    ("tool-name-bad", H, {"messages": MSG, "tools": [{"type": "function", "function": {"name": "a b"}}]},
     "tools[0].function.name"),
    ("tool-parameters-array", H, {"messages": MSG, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": []}}]}, "tools[0].function.parameters"),
    ("tool-choice-unknown", H, {"messages": MSG, "tool_choice": "always"}, "tool_choice"),
    ("tool-choice-number", H, {"messages": MSG, "tool_choice": 1}, "tool_choice"),
    ("tool-choice-required-no-tools", H, {"messages": MSG, "tool_choice": "required"}, "tool_choice"),
    ("tool-choice-unknown-function", H, {"messages": MSG, "tools": [{"type": "function", "function": {"name": "f"}}],
                                         "tool_choice": {"type": "function", "function": {"name": "g"}}},
     "tool_choice"),
    ("tool-calls-not-array", H, {"messages": [{"role": "assistant", "content": None, "tool_calls": {}}]},
     "messages[0].tool_calls"),
    ("tool-call-arguments-number", H, {"messages": [{"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": 3}}]}]},
     "messages[0].tool_calls[0].function.arguments"),
    ("tools-with-grammar", H, {"messages": MSG, "grammar": "root ::= \"a\"",
                               "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
    ("functions-legacy", H, {"messages": MSG, "functions": [{"name": "f"}]}, "functions"),
    ("tool-required-chatml-fallback", H, {"messages": MSG, "tool_choice": "required",
                                          "tools": [{"type": "function", "function": {"name": "f"}}]},
     "tool_choice"),
    ("response-format-unknown", H, {"messages": MSG, "response_format": {"type": "xml"}}, "response_format.type"),
    ("response-format-string", H, {"messages": MSG, "response_format": "json"}, "response_format"),
    ("grammar-invalid", C, {"prompt": "x", "grammar": "root ::= ("}, "grammar"),
    ("top-logprobs-without-logprobs", H, {"messages": MSG, "top_logprobs": 2}, "top_logprobs"),
    ("logprobs-too-many", C, {"prompt": "x", "logprobs": 50}, "logprobs"),
]


@pytest.mark.parametrize("route,body,param", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_request(server, route, body, param):
    if isinstance(body, str):
        r = server.post(route, data=body.encode(), headers={"Content-Type": "application/json"})
    else:
        r = server.post(route, body)
    err = assert_error(r, 400)
    # llama-server's type for a prompt that does not fit; OpenAI's for the rest.
    too_long = err.get("code") == "context_length_exceeded"
    assert err["type"] == ("exceed_context_size_error" if too_long else "invalid_request_error")
    if param is not None:
        assert err["param"] == param, err


def test_nesting_limit_names_the_depth_and_deep_enough_schemas_are_served(server):
    r = server.post(H, data=nested_schema(200).encode(), headers={"Content-Type": "application/json"})
    err = assert_error(r, 400, code="invalid_json")
    assert "deeper than 256 levels" in err["message"], err
    r = server.post(H, data=nested_schema(100).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 200, r.text


def test_grammar_depth_limit(server):
    def grammar(depth):
        return "root ::= " + "(" * depth + '"a"' + ")" * depth + "  # ((( in a comment\n"
    err = assert_error(server.post(C, {"prompt": "x", "grammar": grammar(257), "max_tokens": 1}), 400,
                       param="grammar")
    assert "deeper than 256 levels" in err["message"], err
    r = server.post(C, {"prompt": "x", "grammar": grammar(256), "max_tokens": 1})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == "a"


def test_grammar_fan_out_limit(server):
    """A grammar that can stand at more places at once than the sampler can
    compare pairwise every token (a rule, an enum, rules of rules) is refused
    with the count; 1024 alternatives are served."""
    def alts(n, name="root"):
        return f"{name} ::= (" + " | ".join(f'"w{i}"' for i in range(n)) + ")\n"
    err = assert_error(server.post(C, {"prompt": "x", "grammar": alts(1025), "max_tokens": 1}), 400,
                       param="grammar")
    assert "can stand at 1025 places at once (more than 1024" in err["message"], err
    nested = "root ::= \"x\" (a | b)+\n" + alts(600, "a") + alts(600, "b")
    err = assert_error(server.post(C, {"prompt": "x", "grammar": nested, "max_tokens": 1}), 400, param="grammar")
    assert "1200 places" in err["message"], err
    enum = {"type": "json_schema", "json_schema": {"schema": {"enum": [f"v{i}" for i in range(3000)]}}}
    err = assert_error(server.post(C, {"prompt": "x", "response_format": enum, "max_tokens": 1}), 400,
                       param="response_format")
    assert "the grammar of 'response_format' can stand at" in err["message"], err
    r = server.post(C, {"prompt": "x", "grammar": alts(1024), "max_tokens": 2})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"].startswith("w")


def test_context_length_code(server):
    r = server.post(C, {"prompt": LONG})
    assert_error(r, 400, param="prompt", code="context_length_exceeded")


def test_unknown_route(server):
    assert_error(server.get("/v1/nothing-here"), 404)
    assert_error(server.post("/v1/engines/x/completions", {"prompt": "x"}), 404)


def test_wrong_method(server):
    r = server.get("/v1/chat/completions")
    assert r.status_code in (404, 405)
    assert "error" in r.json()


def test_still_serving_after_errors(server):
    for route, body, _ in [c[1:] for c in CASES]:
        if isinstance(body, str):
            server.post(route, data=body.encode(), headers={"Content-Type": "application/json"})
        else:
            server.post(route, body)
    assert server.get("/health").status_code == 200
    r = server.post(C, {"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] >= 1
    props = server.get("/props").json()
    assert props["busy_slots"] == 0 and props["queued_requests"] == 0
