"""Control vectors as llama-server applies them: --control-vector,
--control-vector-scaled (several files summed at their scales) and
--control-vector-layer-range, added to the hidden state after each layer in
range; --tp 2 gives one device's answers; a file that cannot apply stops the
server with a message naming it. (llama-tp-compare checks the logits against
upstream's in tests/models/compare_matrix.sh.)"""

import subprocess

import pytest

from server_harness import ServerProcess, generated_model, server_bin

PROMPT = "Once upon a time there was a little"


def make(*args):
    subprocess.run([str(server_bin().parent / "llama-tp-make-model"), *map(str, args)], check=True,
                   capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cvec")
    model = generated_model(d / "llama.gguf", weight_type="f32", extra=["--n-layer", "4"])
    vectors = []
    for seed in (3, 4):
        make("--control-vector-of", model, "--seed", seed, "-o", d / f"cvec-{seed}.gguf")
        vectors.append(d / f"cvec-{seed}.gguf")
    return model, vectors


def answer(model, *args):
    s = ServerProcess("-np", "1", "-c", "256", "-t", "2", *args, model=model)
    try:
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "ignore_eos": True,
                                   "n_probs": 4})
        assert r.status_code == 200, r.text
        body = r.json()
        return body["content"], body["completion_probabilities"][0]["top_logprobs"], s.log_text()
    finally:
        assert s.stop() == 0


def test_a_control_vector_changes_the_answer_and_ranks_agree(files):
    model, (a, b) = files
    _, plain_probs, _ = answer(model)
    _, probs, log = answer(model, "--control-vector", a)
    assert probs != plain_probs
    assert "control vector: layers 1,2,3" in log, log
    # Two ranks add the whole direction each, after the layer's sums: with
    # split-invariant sums the same logits as one device.
    one = answer(model, "--control-vector", a, "--split-invariant")
    assert answer(model, "--control-vector", a, "--split-invariant", "--tp", "2")[1] == one[1]
    # Scale 0 adds nothing.
    assert answer(model, "--control-vector-scaled", f"{a}:0")[1] == plain_probs


def test_files_sum_at_their_scales_and_the_range_limits_the_layers(files):
    model, (a, b) = files
    _, both, _ = answer(model, "--control-vector-scaled", f"{a}:0.5,{b}:-1")
    _, repeated, _ = answer(model, "--control-vector-scaled", f"{a}:0.5", "--control-vector-scaled", f"{b}:-1")
    assert both == repeated
    _, ranged, log = answer(model, "--control-vector", a, "--control-vector-layer-range", "2", "3")
    assert "control vector: layers 2,3" in log, log
    assert ranged != answer(model, "--control-vector", a)[1]


@pytest.mark.parametrize("case", ["missing", "model", "other-width"])
def test_a_file_that_cannot_apply_stops_the_server(files, tmp_path, case):
    model, _ = files
    if case == "missing":
        path, expected = tmp_path / "none.gguf", "control vector: cannot open"
    elif case == "model":
        path, expected = model, "is not direction.N"
    else:
        other = generated_model(tmp_path / "wide.gguf", extra=["--n-embd", "512", "--n-head", "16"])
        path = tmp_path / "wide-cvec.gguf"
        make("--control-vector-of", other, "-o", path)
        expected = "the model's hidden state has 256"
    r = subprocess.run([str(server_bin()), "-m", str(model), "--port", "0", "-t", "1", "--control-vector", str(path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert str(path) in r.stderr and expected in r.stderr, r.stderr
