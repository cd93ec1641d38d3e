"""The whole sampler set through libllama's samplers, per request and as
server defaults from llama-server's flags."""

import json

import pytest

from server_harness import ServerProcess, assert_error, generated_model

PROMPT = "Once upon a time"


def text(server, **body):
    body.setdefault("prompt", PROMPT)
    body.setdefault("n_predict", 16)
    body.setdefault("ignore_eos", True)
    r = server.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()["content"]


def test_order_decides_whether_top_k_applies(server):
    greedy = text(server, temperature=0)
    hot = dict(temperature=1.5, top_k=1, top_p=1.0, min_p=0.0, seed=7)
    assert text(server, samplers=["top_k", "temperature"], **hot) == greedy
    # Codes as llama-server's --sampler-seq: k = top_k, t = temperature.
    assert text(server, samplers="kt", **hot) == greedy
    # Without top_k in the chain, sampling at 1.5 leaves the greedy path.
    assert text(server, samplers=["temperature"], **hot) != greedy


def test_top_n_sigma_tiny_is_greedy(server):
    assert text(server, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, top_n_sigma=1e-4, seed=3) == \
        text(server, temperature=0)


def test_dry_breaks_greedy_repetition(server):
    plain = text(server, temperature=0, n_predict=160)
    dry = text(server, temperature=0, n_predict=160, dry_multiplier=4.0, dry_allowed_length=1,
               dry_penalty_last_n=-1)
    assert plain != dry


def test_seeded_samplers_are_reproducible(server):
    for extra in ({"mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.2}, {"mirostat": 1},
                  {"xtc_probability": 1.0, "xtc_threshold": 0.05}, {"typical_p": 0.5, "min_keep": 2},
                  {"dynatemp_range": 0.5, "dynatemp_exponent": 2.0}):
        a = text(server, temperature=1.0, seed=11, **extra)
        b = text(server, temperature=1.0, seed=11, **extra)
        assert a == b, extra
    # XTC at probability 1 always drops the most likely tokens above the threshold.
    assert text(server, temperature=1.0, seed=11, xtc_probability=1.0, xtc_threshold=0.01, top_k=0) != \
        text(server, temperature=1.0, seed=11, top_k=1)


def test_settings_are_reported(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 2, "typical_p": 0.7, "dry_multiplier": 0.5,
                                    "mirostat": 0, "samplers": ["top_k", "temperature"], "min_keep": 3})
    gs = r.json()["generation_settings"]
    assert gs["typical_p"] == pytest.approx(0.7) and gs["dry_multiplier"] == 0.5 and gs["min_keep"] == 3
    assert gs["samplers"] == ["top_k", "temperature"]


@pytest.mark.parametrize("field,value", [
    ("mirostat", 3), ("typical_p", 2), ("xtc_probability", -1), ("dry_base", 0.5), ("samplers", ["bogus"]),
    ("samplers", "kQ"), ("samplers", 5), ("dry_sequence_breakers", "x"), ("min_keep", -1), ("json_schema", 5),
])
def test_bad_sampler_fields(server, field, value):
    assert_error(server.post("/completion", {"prompt": PROMPT, field: value}), 400, param=field)


def test_top_level_json_schema(server):
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 48, "temperature": 0,
                                    "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}},
                                                    "required": ["a"]}})
    assert r.status_code == 200, r.text
    content = r.json()["content"]
    assert content.lstrip().startswith("{"), content
    if r.json()["stop_type"] == "eos":
        assert isinstance(json.loads(content)["a"], int)


def test_server_defaults_from_llama_server_flags():
    s = ServerProcess("-np", "1", "-t", "1", "--samplers", "top_k;temperature", "--top-k", "1", "--temp", "1.5",
                      "--ignore-eos", "-n", "12", "--dry-multiplier", "0.25", "--mirostat-lr", "0.3")
    try:
        p = s.get("/props").json()["default_generation_settings"]["params"]
        assert p["samplers"] == ["top_k", "temperature"]
        assert p["dry_multiplier"] == 0.25 and p["mirostat_eta"] == pytest.approx(0.3)
        assert p["ignore_eos"] is True
        r = s.post("/completion", {"prompt": PROMPT, "seed": 5}).json()
        assert r["tokens_predicted"] == 12
        greedy = s.post("/completion", {"prompt": PROMPT, "temperature": 0}).json()["content"]
        assert r["content"] == greedy
        assert "has no effect" not in s.log_text()
    finally:
        assert s.stop() == 0


def test_server_default_grammar_gives_way_to_a_request_format():
    s = ServerProcess("-np", "1", "-t", "1", "--grammar", 'root ::= "yes" | "no"')
    try:
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 8}).json()
        assert r["content"] in ("yes", "no"), r["content"]
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 8, "json_schema": {"type": "object"}})
        assert r.status_code == 200, r.text
        assert r.json()["content"].lstrip().startswith("{")
    finally:
        assert s.stop() == 0


def test_the_models_suppressed_tokens_are_never_sampled(tmp_path):
    """tokenizer.ggml.suppress_tokens (Gemma 4 Unified conversions write it),
    as upstream's sampler: a -inf bias no request bias can lift."""
    def tokens(server, **body):
        body = {"prompt": PROMPT, "n_predict": 24, "ignore_eos": True, "return_tokens": True, **body}
        r = server.post("/completion", body)
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    plain = ServerProcess("-np", "1", "-c", "512", "-t", "1", model=generated_model(tmp_path / "plain.gguf"))
    try:
        greedy = tokens(plain, temperature=0)
    finally:
        assert plain.stop() == 0
    banned = sorted(set(greedy[:3]))
    model = generated_model(tmp_path / "suppress.gguf", extra=["--suppress-tokens", ",".join(map(str, banned))])
    s = ServerProcess("-np", "1", "-c", "512", "-t", "1", model=model)
    try:
        for body in ({"temperature": 0}, {"temperature": 1.0, "seed": 5},
                     {"temperature": 0, "logit_bias": [[banned[0], 100.0]]}):
            got = tokens(s, **body)
            assert not set(got) & set(banned), (body, got, banned)
        assert tokens(s, temperature=0) != greedy
    finally:
        assert s.stop() == 0
