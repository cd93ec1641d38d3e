"""llama-tp-server against llama-server itself (built from the pinned
llama.cpp): the same model, the same requests on every endpoint of
server/README.md's compatibility tables, and the answers compared: status
codes, the shape of every response (fields, their types, null against a
value), error types, and the text where decoding is greedy. The differences
that are intended are listed below with their reason, as in server/README.md
("Differences from llama-server"); any other fails the test, and so does a
listed one that no longer occurs."""

import json
import os
from pathlib import Path

import pytest

from server_harness import REPO, ServerProcess, free_port, model_path

UPSTREAM = Path(os.environ.get("LLAMA_TP_UPSTREAM_SERVER_BIN", REPO / "build" / "bin" / "llama-server"))
ARGS = ("-np", "4", "-c", "2048", "-t", "1", "--alias", "stories", "--metrics")
CHAT = [{"role": "user", "content": "Once upon a time"}]


@pytest.fixture(scope="module")
def upstream():
    if not UPSTREAM.exists():
        pytest.fail(f"llama-server not found: {UPSTREAM} (built with the tests; or set LLAMA_TP_UPSTREAM_SERVER_BIN)",
                    pytrace=False)
    port = free_port()
    s = ServerProcess(*ARGS, binary=UPSTREAM, port=port,
                      leading_args=["-m", str(model_path()), "--host", "127.0.0.1", "--port", str(port)])
    yield s
    s.stop()


def shape(value):
    """The JSON value with every leaf replaced by its type's name; a list by
    the shapes of its items merged (an empty list: [])."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        merged = None
        for item in value:
            merged = merge(merged, shape(item))
        return [] if merged is None else [merged]
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


def merge(a, b):
    """Two shapes as one: fields of either, lists by their items, other leaves as "a|b"."""
    if a is None:
        return b
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: merge(a.get(k), b.get(k)) if k in a and k in b else a.get(k, b.get(k)) for k in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return [merge(a[0], b[0])] if a and b else a or b
    if a == b:
        return a
    return "|".join(sorted(set(a.split("|")) | set(b.split("|")))) if isinstance(a, str) and isinstance(b, str) \
        else f"{a}|{b}"


def differences(ours, theirs, path=""):
    """Paths where the two shapes part: ('missing', p), ('extra', p), ('type', p, ours, theirs),
    ('empty', p, which) for a list empty on one side only."""
    out = []
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in theirs.keys() - ours.keys():
            out.append(("missing", f"{path}.{k}"))
        for k in ours.keys() - theirs.keys():
            out.append(("extra", f"{path}.{k}"))
        for k in ours.keys() & theirs.keys():
            out += differences(ours[k], theirs[k], f"{path}.{k}")
    elif isinstance(ours, list) and isinstance(theirs, list):
        if ours and theirs:
            out += differences(ours[0], theirs[0], f"{path}[]")
        elif ours or theirs:
            out.append(("empty", path, "theirs" if ours else "ours"))
    elif ours != theirs:
        out.append(("type", path, json.dumps(ours), json.dumps(theirs)))
    return out


PROMPT = "Once upon a time"
# name: (method, path, body, where the greedy text is); body None: GET; a str body is sent as it is.
CASES = {
    "health": ("GET", "/health", None, None),
    "models": ("GET", "/v1/models", None, "data.0.meta.ftype"),
    "props": ("GET", "/props", None, "model_ftype"),
    "slots": ("GET", "/slots", None, None),
    "completion": ("POST", "/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0}, "content"),
    "completion-probs": ("POST", "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0, "n_probs": 2},
                         "content"),
    "completion-post-sampling": ("POST", "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                                         "n_probs": 2, "post_sampling_probs": True}, "content"),
    "completion-tokens": ("POST", "/completion", {"prompt": [1, 400, 500], "n_predict": 4, "temperature": 0,
                                                  "return_tokens": True}, "content"),
    "v1-completions": ("POST", "/v1/completions", {"prompt": PROMPT, "max_tokens": 8, "temperature": 0},
                       "choices.0.text"),
    "chat": ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 8, "temperature": 0},
             "choices.0.message.content"),
    "chat-logprobs": ("POST", "/v1/chat/completions", {"messages": CHAT, "max_tokens": 4, "temperature": 0,
                                                       "logprobs": True, "top_logprobs": 2},
                      "choices.0.message.content"),
    "tokenize": ("POST", "/tokenize", {"content": PROMPT, "with_pieces": True}, None),
    "detokenize": ("POST", "/detokenize", {"tokens": [1, 400, 500]}, "content"),
    "apply-template": ("POST", "/apply-template", {"messages": CHAT}, "prompt"),
    "anthropic": ("POST", "/v1/messages", {"model": "stories", "max_tokens": 8, "temperature": 0,
                                           "messages": CHAT}, "content.0.text"),
    "anthropic-count": ("POST", "/v1/messages/count_tokens", {"model": "stories", "messages": CHAT}, "input_tokens"),
    "responses": ("POST", "/v1/responses", {"model": "stories", "input": PROMPT, "max_output_tokens": 8,
                                            "temperature": 0}, "output.0.content.0.text"),
    "error-no-messages": ("POST", "/v1/chat/completions", {"max_tokens": 4}, None),
    "error-bad-json": ("POST", "/v1/chat/completions", "{", None),
    "error-bad-token": ("POST", "/detokenize", {"tokens": [1, 400, 600]}, None),
    "error-bad-type": ("POST", "/completion", {"prompt": PROMPT, "n_predict": "eight"}, None),
    "error-context": ("POST", "/completion", {"prompt": "word " * 1000, "n_predict": 1}, None),
    "error-route": ("GET", "/no-such-route", None, None),
}

ERRORS = ("error-bad-json", "error-bad-token", "error-bad-type", "error-context", "error-no-messages", "error-route")
GENERATION_SETTINGS = ("completion", "completion-probs", "completion-post-sampling", "completion-tokens")
# Intended differences (server/README.md, "Differences llama-server's own
# answers show"): (cases, difference, reason). A difference is ("status",
# ours, theirs), ("text", ...) or one of differences()'s tuples; each must
# occur in at least one of its cases.
INTENDED = [
    (ERRORS, ("extra", ".error.param"), "OpenAI's error object: the field at fault"),
    (ERRORS, ("type", ".error.code", '"string"', '"number"'),
     "OpenAI's error object: code names the problem (invalid_value, ...); the HTTP status is the same"),
    (("error-bad-json", "error-bad-token"), ("status", 400, 500),
     "a body that is not JSON and a token id outside the vocabulary are the client's error"),
    (("chat",), ("extra", ".choices[].logprobs"), "OpenAI's shape: logprobs null when not asked for"),
    (("chat-logprobs",), ("extra", ".choices[].logprobs.refusal"), "OpenAI's shape"),
    (("chat-stream", "chat-stream-usage"), ("extra", ".first.choices[].logprobs"),
     "OpenAI's shape: logprobs null when not asked for"),
    (("chat-stream", "chat-stream-usage"), ("extra", ".middle.choices[].logprobs"), "the same"),
    (("chat-stream",), ("extra", ".last.choices[].logprobs"), "the same"),
    (("chat-stream-usage", "v1-completions-stream-usage"), ("extra", ".first.usage"),
     "OpenAI's stream_options.include_usage: usage null on every chunk but the last"),
    (("chat-stream-usage", "v1-completions-stream-usage"), ("extra", ".middle.usage"), "the same"),
    (("v1-completions-stream-usage",), ("empty", ".last.choices", "ours"),
     "OpenAI's stream_options.include_usage: a last chunk of the usage alone (llama-server ignores it on completions)"),
    (("v1-completions-stream-usage",), ("type", ".middle.choices[].finish_reason", '"null|string"', '"null"'),
     "the same: the finish chunk comes before it"),
    (GENERATION_SETTINGS, ("extra", ".generation_settings.cache_prompt"), "llama-tp's: the request's cache_prompt"),
    (("completion-stream",), ("extra", ".last.generation_settings.cache_prompt"), "the same"),
    (("models",), ("extra", ".data[].meta.architecture"), "llama-tp's: the model's architecture"),
    (("props",), ("extra", ".busy_slots"), "llama-tp's own figures"),
    (("props",), ("extra", ".queued_requests"), "llama-tp's own figures"),
    (("props",), ("extra", ".n_ctx"), "llama-tp's own figures"),
    (("props",), ("extra", ".n_ctx_slot"), "llama-tp's own figures"),
    (("props",), ("extra", ".tp"), "llama-tp's own figures"),
    (("props",), ("extra", ".cache_type_k"), "llama-tp's own figures"),
    (("props",), ("extra", ".cache_type_v"), "llama-tp's own figures"),
    (("props",), ("extra", ".chat_template_origin"), "llama-tp's own figures"),
    (("props",), ("extra", ".default_generation_settings.params.grammar"),
     "the defaults in the same fields as a request's settings"),
    (("props",), ("extra", ".default_generation_settings.params.dry_sequence_breakers"), "the same"),
    (("slots",), ("extra", "[].n_cached_tokens"), "llama-tp's: what the slot's cache holds"),
]
SLOT_PARAMS = ("preserved_tokens", "grammar_triggers", "logit_bias", "grammar", "dry_sequence_breakers",
               "cache_prompt", "stop", "grammar_lazy")
INTENDED += [(("slots",), ("extra", f"[].params.{f}"), "a slot's params are its request's whole settings")
             for f in SLOT_PARAMS]
INTENDED += [(("responses",), ("extra", p), "OpenAI's Responses shape") for p in
             (".incomplete_details", ".usage.output_tokens_details")]


@pytest.fixture(scope="module")
def seen():
    """The cases run and the intended differences they showed, checked once
    they all ran: a listed difference whose cases all ran must have occurred."""
    ran = {"cases": set(), "found": set()}
    yield ran
    gone = [(c, d) for c, d, _ in INTENDED if set(c) <= ran["cases"] and d not in ran["found"]]
    assert not gone, f"listed differences that no longer occur: {gone}"


def check_intended(seen, case, found):
    intended = {d for cases, d, _ in INTENDED if case in cases}
    unexplained = [d for d in found if d not in intended]
    assert not unexplained, f"{case}: differences from llama-server not listed as intended: {unexplained}"
    seen["cases"].add(case)
    seen["found"] |= set(found) & intended


def send(server, method, path, body):
    if method == "GET":
        return server.get(path)
    if isinstance(body, str):
        return server.post(path, data=body, headers={**server.headers(), "Content-Type": "application/json"})
    return server.post(path, body)


def at(value, dotted):
    for key in dotted.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_answer_as_llama_server(case, server, upstream, seen):
    method, path, body, text = CASES[case]
    ours, theirs = send(server, method, path, body), send(upstream, method, path, body)
    found = []
    if ours.status_code != theirs.status_code:
        found.append(("status", ours.status_code, theirs.status_code))
    try:
        a, b = ours.json(), theirs.json()
    except ValueError:
        a = b = None
        if ours.headers.get("Content-Type", "").startswith("application/json") != \
                theirs.headers.get("Content-Type", "").startswith("application/json"):
            found.append(("content-type", ours.headers.get("Content-Type"), theirs.headers.get("Content-Type")))
    if a is not None and b is not None:
        found += differences(shape(a), shape(b))
        if text and ours.status_code == 200 and theirs.status_code == 200:
            if at(a, text) != at(b, text):
                found.append(("text", text, json.dumps(at(a, text)), json.dumps(at(b, text))))
    check_intended(seen, case, found)


STREAMS = {
    "completion-stream": ("/completion", {"prompt": PROMPT, "n_predict": 6, "temperature": 0, "stream": True}),
    "chat-stream": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0, "stream": True}),
    "chat-stream-usage": ("/v1/chat/completions", {"messages": CHAT, "max_tokens": 6, "temperature": 0,
                                                   "stream": True, "stream_options": {"include_usage": True}}),
    "v1-completions-stream": ("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                                  "stream": True}),
    "v1-completions-stream-usage": ("/v1/completions", {"prompt": PROMPT, "max_tokens": 6, "temperature": 0,
                                                        "stream": True, "stream_options": {"include_usage": True}}),
}


def stream_events(server, path, body):
    """The data lines of a server-sent event stream: JSON objects, or the string "[DONE]"."""
    r = server.post(path, body, stream=True)
    assert r.status_code == 200, r.text
    out = []
    for line in r.iter_lines(decode_unicode=True):
        if line.startswith("data: "):
            data = line[6:]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream_shape(events):
    """The first event's shape, the middle ones' merged, the last object's, and whether [DONE] ends it."""
    objects = [e for e in events if e != "[DONE]"]
    middle = None
    for e in objects[1:-1]:
        middle = merge(middle, shape(e))
    return {"first": shape(objects[0]), "middle": middle or {}, "last": shape(objects[-1]),
            "done": "bool" if events[-1] == "[DONE]" else "null"}


@pytest.mark.parametrize("case", sorted(STREAMS))
def test_same_stream_as_llama_server(case, server, upstream, seen):
    path, body = STREAMS[case]
    ours, theirs = stream_events(server, path, body), stream_events(upstream, path, body)
    check_intended(seen, case, differences(stream_shape(ours), stream_shape(theirs)))


def metric_names(server):
    return {line.split("{")[0].split()[0] for line in server.get("/metrics").text.splitlines()
            if line and not line.startswith("#")}


def test_same_metrics_as_llama_server(server, upstream):
    ours, theirs = metric_names(server), metric_names(upstream)
    assert theirs - ours == set(), f"llama-server's metrics missing here: {sorted(theirs - ours)}"
