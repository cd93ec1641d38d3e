"""-ctk / -ctv: quantized KV caches serve, under tensor parallelism too, and
a type the model's heads cannot hold is refused at startup."""

import subprocess

import pytest

from server_harness import ServerProcess, generated_model, model_path, server_bin

BODY = {"prompt": "The quick brown fox", "n_predict": 12, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("kv") / "llama-q8_0.gguf")


def answer(model, *flags):
    s = ServerProcess("-np", "2", "-c", "512", *flags, model=model)
    try:
        r = s.post("/completion", BODY)
        assert r.status_code == 200, r.text
        return r.json()["content"], s.get("/props").json(), s.log_text()
    finally:
        assert s.stop() == 0


def test_quantized_cache_serves_at_tp1_and_tp2(model):
    text1, props, log = answer(model, "-t", "1", "-ctk", "q8_0", "-ctv", "q8_0")
    assert props["cache_type_k"] == "q8_0" and props["cache_type_v"] == "q8_0"
    assert "-ctk has no effect" not in log
    assert len(text1) > 0
    text2, props2, _ = answer(model, "--tp", "2", "-t", "2", "-ctk", "q8_0", "-ctv", "q8_0", "--split-invariant")
    text1s, _, _ = answer(model, "-t", "1", "-ctk", "q8_0", "-ctv", "q8_0", "--split-invariant")
    # Split-invariant sums: the same answer from one rank and from two, with the same cache.
    assert text2 == text1s


def test_mixed_and_16_bit_types(model):
    for k, v in (("bf16", "f16"), ("q4_0", "q5_1"), ("iq4_nl", "q8_0")):
        _, props, _ = answer(model, "-t", "1", "--cache-type-k", k, "--cache-type-v", v)
        assert (props["cache_type_k"], props["cache_type_v"]) == (k, v)
    # The remaining two types, with each rank holding its half of the heads.
    _, props, _ = answer(model, "--tp", "2", "-t", "2", "-ctk", "q4_1", "-ctv", "q5_0")
    assert (props["cache_type_k"], props["cache_type_v"]) == ("q4_1", "q5_0")


def test_cache_type_the_heads_cannot_hold_is_refused():
    # The bundled model's heads are 8 wide; q8_0 stores blocks of 32.
    r = subprocess.run([str(server_bin()), "-m", str(model_path()), "--port", "0", "-ctk", "q8_0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "q8_0 stores blocks of 32" in r.stderr and "head of 8" in r.stderr, r.stderr


def test_unknown_cache_type_is_a_usage_error():
    r = subprocess.run([str(server_bin()), "-m", str(model_path()), "-ctk", "q3_k"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2
    assert "-ctk" in r.stderr, r.stderr
