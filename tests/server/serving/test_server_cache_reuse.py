"""--cache-reuse N (and a request's n_cache_reuse), as llama-server: past the
common prefix of a slot's cache and a new prompt, cached chunks of at least N
tokens that the prompt holds next are moved back to the prompt's positions,
their keys rotated, instead of being computed again. What lies between them
is dropped. Sliding-window layers that lost the cells a moved chunk needs
fall back to the common prefix."""

import random

import pytest

from server_harness import ServerProcess, generated_model

rng = random.Random(11)
HEAD = [rng.randrange(300, 20000) for _ in range(24)]
GONE = [rng.randrange(300, 20000) for _ in range(40)]
KEPT = [rng.randrange(300, 20000) for _ in range(64)]
TAIL = [rng.randrange(300, 20000) for _ in range(6)]
# No prompt cache: what a slot reuses is only what its own cells hold.
COMMON = ("-np", "1", "-c", "1024", "-b", "16", "-t", "2", "--cache-ram", "0")


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory):
    # One layer: a token's key and value depend only on the token and its
    # position, so moved cells equal computed ones up to the keys' rotation.
    return generated_model(tmp_path_factory.mktemp("reuse") / "one-layer.gguf", weight_type="f32",
                           extra=["--n-layer", "1"])


def complete(server, prompt, **extra):
    body = {"prompt": prompt, "n_predict": 1, "temperature": 0, "n_probs": 8, **extra}
    r = server.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()


def probs(answer):
    return {p["id"]: p["logprob"] for p in answer["completion_probabilities"][0]["top_logprobs"]}


def assert_close(a, b, tol):
    assert a.keys() == b.keys(), (a, b)
    for k in a:
        assert abs(a[k] - b[k]) <= tol, (k, a[k], b[k])


@pytest.mark.parametrize("tp", ["1", "2"])
def test_a_moved_chunk_is_not_computed_again(one_layer, tp):
    s = ServerProcess("--tp", tp, *COMMON, "--cache-reuse", "16", model=one_layer)
    try:
        complete(s, HEAD + GONE + KEPT)
        reused = complete(s, HEAD + KEPT + TAIL)
        # HEAD came as the prefix, KEPT moved back over GONE; only TAIL is computed.
        assert reused["tokens_cached"] == len(HEAD) + len(KEPT)
        assert reused["timings"]["prompt_n"] == len(TAIL)
        fresh = complete(s, HEAD + KEPT + TAIL, cache_prompt=False)
        assert fresh["timings"]["prompt_n"] == len(HEAD) + len(KEPT) + len(TAIL)
        # F16 keys rotated by another angle round differently: close, not equal.
        assert_close(probs(reused), probs(fresh), 2e-3)
        assert reused["content"] == fresh["content"]
    finally:
        assert s.stop() == 0


def test_chunks_shorter_than_n_are_computed(one_layer):
    s = ServerProcess(*COMMON, "--cache-reuse", "100", model=one_layer)
    try:
        complete(s, HEAD + GONE + KEPT)
        answer = complete(s, HEAD + KEPT + TAIL)
        assert answer["tokens_cached"] == len(HEAD)
        assert answer["timings"]["prompt_n"] == len(KEPT) + len(TAIL)
        # The request's own n_cache_reuse wins over the server's.
        complete(s, HEAD + GONE + KEPT)
        assert complete(s, HEAD + KEPT + TAIL, n_cache_reuse=16)["tokens_cached"] == len(HEAD) + len(KEPT)
    finally:
        assert s.stop() == 0


def test_off_by_default_and_per_request(one_layer):
    s = ServerProcess(*COMMON, model=one_layer)
    try:
        complete(s, HEAD + GONE + KEPT)
        assert complete(s, HEAD + KEPT + TAIL)["tokens_cached"] == len(HEAD)
        complete(s, HEAD + GONE + KEPT)
        answer = complete(s, HEAD + KEPT + TAIL, n_cache_reuse=16)
        assert answer["tokens_cached"] == len(HEAD) + len(KEPT)
        # Several chunks, each moved by its own distance.
        complete(s, HEAD + GONE[:20] + KEPT[:32] + GONE[20:] + KEPT[32:])
        both = complete(s, HEAD + KEPT + TAIL, n_cache_reuse=16)
        assert both["tokens_cached"] == len(HEAD) + len(KEPT)
        assert_close(probs(both), probs(complete(s, HEAD + KEPT + TAIL, cache_prompt=False)), 2e-3)
        r = s.post("/completion", {"prompt": HEAD, "n_cache_reuse": -1})
        assert r.status_code == 400 and "n_cache_reuse" in r.text, r.text
    finally:
        assert s.stop() == 0


def test_sliding_window_layers_that_lost_the_chunk_compute_it(tmp_path):
    # A window of 8: once the window layers' cells (a multiple of 256) are
    # full, they hold only the last positions, none of KEPT's.
    model = generated_model(tmp_path / "gemma3.gguf", arch="gemma3", weight_type="f32",
                            extra=["--n-swa", "8", "--swa-pattern", "2"])
    s = ServerProcess(*COMMON, "--cache-reuse", "16", model=model)
    try:
        fill = [rng.randrange(300, 20000) for _ in range(400)]
        complete(s, HEAD + GONE + KEPT + fill)
        answer = complete(s, HEAD + KEPT + TAIL)
        assert answer["tokens_cached"] == 0
        fresh = complete(s, HEAD + KEPT + TAIL, cache_prompt=False)
        assert probs(answer) == probs(fresh)
    finally:
        assert s.stop() == 0
