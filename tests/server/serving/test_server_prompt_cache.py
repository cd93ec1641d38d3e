"""The prompt cache (--cache-ram, on by default as in llama-server): a slot's
cells go to host memory when another prompt takes the slot, and come back
for a later prompt that shares them, which then continues exactly as it
did; --cache-ram 0 turns it off. Of equally good slots, a prompt takes the
least recently used one (an empty one first)."""

import random

import pytest

from server_harness import ServerProcess, generated_model

STORY = ("Once upon a time there was a little girl named Lily who lived in a small house near the woods. "
         "Every morning she walked to the river to look at the fish and the ducks, and she sang a song. ")
OTHER = ("The old man sat on the bench in the park and fed the birds with bread crumbs from a paper bag, "
         "while the children played with a red ball on the grass. ")


def complete(server, prompt, n=8):
    r = server.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def test_a_prompt_that_lost_its_slot_gets_its_cells_back():
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1")
    try:
        first = complete(s, STORY)
        assert first["tokens_cached"] == 0
        # Served from the slot's own cells: the answer a cached prompt gets
        # (its last token decoded alone may round unlike the whole prompt).
        cached = complete(s, STORY)
        assert cached["tokens_cached"] == first["tokens_evaluated"] - 1
        other = complete(s, OTHER)
        assert other["tokens_cached"] <= 1  # at most the BOS token
        again = complete(s, STORY)
        # Every prompt token but the last (decoded for its logits) came back.
        assert again["tokens_cached"] == first["tokens_evaluated"] - 1
        assert again["content"] == cached["content"]
        # The other prompt went to the cache in turn.
        assert complete(s, OTHER)["tokens_cached"] == other["tokens_evaluated"] - 1
        assert "restored from the prompt cache" in s.log_text()
        # The default limit is said at start, with what it was made from.
        line = [l for l in s.log_text().splitlines() if "prompt cache: " in l]
        assert line and "MiB at most" in line[0] and "--cache-ram sets it" in line[0], s.log_text()
    finally:
        assert s.stop() == 0


def test_cache_ram_zero_keeps_nothing():
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "1", "--cache-ram", "0")
    try:
        complete(s, STORY)
        complete(s, OTHER)
        assert complete(s, STORY)["tokens_cached"] <= 1
        assert "prompt cache" not in s.log_text()
    finally:
        assert s.stop() == 0


def test_a_new_prompt_takes_an_empty_slot_before_one_that_holds_a_prompt():
    # Both prompts begin with the BOS token: too little of the second to take
    # the first one's slot for it.
    s = ServerProcess("-np", "2", "-c", "1024", "-t", "1", "--cache-ram", "0")
    try:
        first = complete(s, STORY)
        complete(s, OTHER)  # into the second slot: the first keeps the story
        assert complete(s, STORY)["tokens_cached"] == first["tokens_evaluated"] - 1
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("prompt-cache") / "llama-q8_0.gguf")


def test_the_cache_holds_every_rank_s_cells(model):
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "2", "--tp", "2", "--split-invariant", model=model)
    try:
        first = complete(s, STORY)
        cached = complete(s, STORY)
        complete(s, OTHER)
        again = complete(s, STORY)
        assert again["tokens_cached"] == first["tokens_evaluated"] - 1
        assert again["content"] == cached["content"]
    finally:
        assert s.stop() == 0


def probs_of(answer):
    return [[(p["id"], p["logprob"]) for p in c["top_logprobs"]] for c in answer["completion_probabilities"]]


@pytest.mark.parametrize("checkpoints", ["32", "0"])
def test_context_checkpoints_resume_a_sliding_window_model(tmp_path, checkpoints):
    """--ctx-checkpoints as llama-server's: where sliding-window layers keep
    only their window, a slot that generated far past its prompt cannot
    resume inside it; the checkpoint taken 4 tokens before the prompt's end
    can, and the next prompt continues from there with the same numbers."""
    rng = random.Random(5)
    model = generated_model(tmp_path / "gemma3.gguf", arch="gemma3", weight_type="f32",
                            extra=["--n-swa", "8", "--swa-pattern", "2"])
    # Batches of 16: the window layers hold 512 cells a slot, which 600 generated tokens overrun.
    s = ServerProcess("-np", "1", "-c", "2048", "-b", "16", "-t", "2", "--ctx-checkpoints", checkpoints,
                      "-lv", "4", model=model)
    prompt = [rng.randrange(300, 20000) for _ in range(100)]
    turn = [rng.randrange(300, 20000) for _ in range(20)]
    fields = {"temperature": 0, "ignore_eos": True, "n_probs": 3}
    try:
        first = s.post("/completion", {"prompt": prompt, "n_predict": 600, **fields}).json()
        second = s.post("/completion", {"prompt": prompt + turn, "n_predict": 8, **fields}).json()
        fresh = s.post("/completion", {"prompt": prompt + turn, "n_predict": 8, "cache_prompt": False,
                                       **fields}).json()
    finally:
        assert s.stop() == 0
    log = s.log_text()
    if checkpoints == "0":
        assert second["tokens_cached"] == 0, second
        assert "context checkpoint" not in log
    else:
        assert second["tokens_cached"] == first["tokens_evaluated"] - 4, (first["tokens_evaluated"], second)
        assert "restored from the prompt cache (a context checkpoint)" in log, log
    assert second["content"] == fresh["content"]
    for a, b in zip(probs_of(second), probs_of(fresh)):
        for (ia, la), (ib, lb) in zip(a, b):
            assert ia == ib and abs(la - lb) < 1e-5, (a, b)


@pytest.mark.parametrize("checkpoints", ["32", "1"])
def test_a_checkpoint_serves_again_and_a_slot_keeps_its_newest(tmp_path, checkpoints):
    """A restored checkpoint stays in the cache for the next branch of the
    same turn; --ctx-checkpoints 1 keeps only the slot's newest one."""
    rng = random.Random(6)
    model = generated_model(tmp_path / "gemma3.gguf", arch="gemma3", weight_type="f32",
                            extra=["--n-swa", "8", "--swa-pattern", "2"])
    s = ServerProcess("-np", "1", "-c", "2048", "-b", "16", "-t", "2", "--ctx-checkpoints", checkpoints,
                      model=model)
    prompt = [rng.randrange(300, 20000) for _ in range(100)]
    branch = lambda: prompt + [rng.randrange(300, 20000) for _ in range(20)]  # noqa: E731
    fields = {"temperature": 0, "ignore_eos": True}
    try:
        first = s.post("/completion", {"prompt": prompt, "n_predict": 600, **fields}).json()
        at = first["tokens_evaluated"] - 4
        # Resumes at the first prompt's checkpoint, and leaves one of its own.
        assert s.post("/completion", {"prompt": branch(), "n_predict": 600, **fields}).json()["tokens_cached"] == at
        for _ in range(2):
            r = s.post("/completion", {"prompt": branch(), "n_predict": 600, **fields}).json()
            assert r["tokens_cached"] == (at if checkpoints == "32" else 0), r
    finally:
        assert s.stop() == 0
