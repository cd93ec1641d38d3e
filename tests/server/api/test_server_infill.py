"""/infill: fill-in-the-middle with the model's FIM tokens (a generated model
with deepseek-coder's vocabulary), extra files, --spm-infill, and a clear
501 for a model without them."""

import pytest

from server_harness import ServerProcess, assert_error, generated_model

PRE, SUF, MID = "<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"
BODY = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
        "n_predict": 6, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("fim") / "coder.gguf", vocab="ggml-vocab-deepseek-coder.gguf")


def infill(server, **extra):
    r = server.post("/infill", {**BODY, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_prefix_suffix_middle(coder):
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1", model=coder)
    try:
        body = infill(s, prompt="a")
        p = body["prompt"]
        assert p.index(PRE) < p.index("def add") < p.index(SUF) < p.index("print(add") < p.index(MID)
        assert p.endswith(MID + "a")
        assert body["stop"] is True and body["tokens_predicted"] == 6
        n = len(s.post("/tokenize", {"content": p, "parse_special": True}).json()["tokens"])
        assert abs(body["tokens_evaluated"] - n) <= 1  # the tokenizer may add BOS
        # Other files come first, as context.
        body = infill(s, input_extra=[{"filename": "util.py", "text": "# helpers for adding\n"}])
        assert body["prompt"].index("helpers for adding") < body["prompt"].index(PRE)
        assert body["tokens_evaluated"] > infill(s)["tokens_evaluated"]
        for bad, param in (({"input_suffix": None}, "input_suffix"), ({"input_prefix": 5}, "input_prefix"),
                           ({"input_extra": [{"text": 3}]}, "input_extra")):
            b = {**BODY, **bad}
            if bad.get("input_suffix", 1) is None:
                del b["input_suffix"]
            assert_error(s.post("/infill", b), 400, param=param)
    finally:
        assert s.stop() == 0


def test_spm_infill_puts_the_suffix_first(coder):
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1", "--spm-infill", model=coder)
    try:
        p = infill(s)["prompt"]
        assert p.index(SUF) < p.index("print(add") < p.index(PRE) < p.index("def add") < p.index(MID)
    finally:
        assert s.stop() == 0


def test_model_without_fim_tokens(server):
    r = server.post("/infill", BODY)
    assert_error(r, 501)
    assert "prefix token is missing" in r.json()["error"]["message"]
