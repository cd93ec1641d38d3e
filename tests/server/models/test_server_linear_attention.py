"""Linear attention (qwen35, and qwen3next with experts: Gated DeltaNet
layers beside gated full attention) served: its recurrent state is one per slot, goes on only from
where it is, and comes back for a shared prefix through context checkpoints
(--ctx-checkpoints) and saved slots, taken at one split and restored at
another. What would cut a state back (context shift, reused chunks) is
turned off with a warning, never run on a wrong state; a draft is checked
from a state saved before it, which a rejection goes back to."""

import json
import random
import threading

import pytest

from server_harness import ServerProcess, generated_model, server_bin

SHAPE = ["--n-layer", "4", "--ssm-n-group", "4", "--ssm-dt-rank", "8", "--ssm-d-state", "64"]


# qwen35's value heads tiled over its key heads, qwen3next's grouped by key
# head beside routed and shared experts.
ARCHS = {"qwen35": SHAPE, "qwen3next": SHAPE + ["--n-expert", "4", "--n-expert-used", "2", "--n-ff-exp", "256"]}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def model(request, tmp_path_factory):
    arch = request.param
    return generated_model(tmp_path_factory.mktemp("linear") / f"{arch}-q8_0.gguf", arch=arch, extra=ARCHS[arch])


def complete(server, prompt, n=12, **fields):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True, **fields}
    r = server.post("/completion", body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def tokens(seed, n):
    rng = random.Random(seed)
    return [rng.randrange(300, 20000) for _ in range(n)]


def test_four_slots_at_once_answer_as_each_alone(model):
    s = ServerProcess("-np", "4", "-c", "2048", "-t", "2", model=model)
    prompts = [tokens(seed, 40 + 13 * seed) for seed in range(4)]
    try:
        alone = [complete(s, p, cache_prompt=False)["content"] for p in prompts]
        together = [None] * 4

        def ask(i):
            together[i] = complete(s, prompts[i], cache_prompt=False)["content"]

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert together == alone
        # Streamed through the chat template, the same text as in one piece.
        body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": 12,
                "temperature": 0}
        whole = s.post("/v1/chat/completions", body).json()["choices"][0]["message"]["content"]
        r = s.post("/v1/chat/completions", dict(body, stream=True), stream=True)
        text = ""
        for raw in r.iter_lines():
            line = raw.decode("utf-8")
            if line.startswith("data: ") and line != "data: [DONE]":
                choices = json.loads(line[6:])["choices"]
                text += (choices[0]["delta"].get("content") or "") if choices else ""
        assert text == whole
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("checkpoints", ["8", "0"])
def test_a_shared_prefix_resumes_from_a_checkpoint_with_the_cold_answer(model, checkpoints):
    """The slot's state has taken in the first prompt and its answer; the
    next prompt shares only the first prompt, where no state is, so it
    resumes from the checkpoint taken 4 tokens before that prompt's end."""
    s = ServerProcess("-np", "1", "-c", "2048", "-b", "64", "-t", "2", "--ctx-checkpoints", checkpoints,
                      model=model)
    prefix, turn = tokens(1, 1000), tokens(2, 30)
    try:
        first = complete(s, prefix, n=16)
        second = complete(s, prefix + turn, n=16, n_probs=3)
        cold = complete(s, prefix + turn, n=16, n_probs=3, cache_prompt=False)
    finally:
        assert s.stop() == 0
    if checkpoints == "0":
        assert second["tokens_cached"] == 0, second
    else:
        assert second["tokens_cached"] == first["tokens_evaluated"] - 4, (first["tokens_evaluated"], second)
        assert second["timings"]["prompt_n"] == len(prefix + turn) - second["tokens_cached"]
        assert cold["timings"]["prompt_n"] > 1000
        assert "restored from the prompt cache (a context checkpoint)" in s.log_text()
    assert second["content"] == cold["content"]
    for a, b in zip(second["completion_probabilities"], cold["completion_probabilities"]):
        for x, y in zip(a["top_logprobs"], b["top_logprobs"]):
            assert x["id"] == y["id"] and abs(x["logprob"] - y["logprob"]) < 1e-3, (x, y)


WORDS = "river stone lamp garden window paper silver cloud market bridge orange quiet".split()


def words(seed, n):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.mark.parametrize("min_step", ["0", "8192"])
def test_checkpoints_where_user_messages_open(tmp_path, min_step):
    """Qwen 3.5's own chat template: a conversation's last user message gets
    a checkpoint where it opens, an earlier one only --checkpoint-min-step
    past the newest (the first one always). An edited message resumes from
    the checkpoint before it, with the cold answer."""
    share = server_bin().parents[1] / "share" / "llama-tp"
    model = generated_model(tmp_path / "qwen35.gguf", arch="qwen35",
                            extra=SHAPE + ["--chat-template", str(share / "Qwen3.5-4B.jinja")])
    s = ServerProcess("-np", "1", "-c", "4096", "-b", "64", "-t", "2", "--checkpoint-min-step", min_step, model=model)
    turns = [("system", words(1, 60)), ("user", words(2, 150)), ("assistant", words(3, 150)),
             ("user", words(4, 150)), ("assistant", words(5, 150)), ("user", words(6, 40))]

    def chat(edit=None, **fields):
        msgs = [{"role": r, "content": words(99, 20) if i == edit else c} for i, (r, c) in enumerate(turns)]
        body = {"messages": msgs, "max_tokens": 8, "temperature": 0, **fields}
        r = s.post("/v1/chat/completions", body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    def prompt_tokens(edit=None):
        msgs = [{"role": r, "content": words(99, 20) if i == edit else c} for i, (r, c) in enumerate(turns)]
        text = s.post("/apply-template", {"messages": msgs}).json()["prompt"]
        return s.post("/tokenize", {"content": text, "add_special": True, "parse_special": True}).json()["tokens"]

    try:
        whole = prompt_tokens()
        edited = {i: prompt_tokens(i) for i in (3, 5)}
        chat()
        answers = {i: (chat(edit=i), chat(edit=i, cache_prompt=False)) for i in (5, 3)}
    finally:
        assert s.stop() == 0
    shared = {i: next(k for k, (a, b) in enumerate(zip(whole, edited[i])) if a != b) for i in edited}
    cached = {i: warm["usage"]["prompt_tokens_details"]["cached_tokens"] for i, (warm, _) in answers.items()}
    for i, (warm, cold) in answers.items():
        assert warm["choices"][0]["message"] == cold["choices"][0]["message"]
        assert warm["timings"]["prompt_n"] == warm["usage"]["prompt_tokens"] - cached[i]
    # The last user message's checkpoint: where it opens, a few tokens
    # (its opening marker and role) before the edit.
    assert shared[5] - 6 <= cached[5] < shared[5], (shared, cached)
    if min_step == "0":
        assert shared[3] - 6 <= cached[3] < shared[3], (shared, cached)
    else:
        # Only the first user message's: just past the system prompt.
        assert 0 < cached[3] < shared[3] - 150, (shared, cached)


def test_a_prompt_that_goes_on_from_the_whole_answer_keeps_the_state(model):
    """A stop string caught inside the answer: the state has taken in every
    decoded token, so a next prompt extending the same tokens goes on from
    it; one that parts earlier is computed again, with the cold answer."""
    s = ServerProcess("-np", "1", "-c", "2048", "-t", "2", "--ctx-checkpoints", "0", model=model)
    prompt = tokens(3, 60)
    try:
        first = complete(s, prompt, n=20, return_tokens=True)
        on = prompt + first["tokens"] + tokens(4, 5)
        follow = complete(s, on)
        assert follow["tokens_cached"] == len(prompt) + len(first["tokens"]) - 1
        assert follow["content"] == complete(s, on, cache_prompt=False)["content"]
        parted = prompt + first["tokens"][:5] + tokens(5, 5)
        again = complete(s, parted)
        assert again["tokens_cached"] == 0
        assert again["content"] == complete(s, parted, cache_prompt=False)["content"]
    finally:
        assert s.stop() == 0


def test_what_would_cut_a_state_back_is_off_with_a_warning(model):
    s = ServerProcess("-np", "1", "-c", "128", "-t", "2", "--context-shift", "--cache-reuse", "4", model=model)
    try:
        r = complete(s, tokens(6, 40), n=200)
        # No shift: the answer ends where the slot's context does.
        assert r["tokens_evaluated"] + r["tokens_predicted"] <= 128, r
        assert r["truncated"] is False or r["stop_type"] == "limit", r
    finally:
        assert s.stop() == 0
    log = s.log_text()
    assert "--context-shift has no effect" in log
    assert "--cache-reuse has no effect" in log


@pytest.mark.parametrize("tp", ["1", "2"])
def test_a_rejected_draft_takes_the_state_back(model, tp):
    """Drafts of the same model in q4_k: most confirmed, some rejected, each
    rejection going back to the state saved before the draft and the
    confirmed tokens decoded again; the tokens are those without drafts, on
    both slots (each saves its own state)."""
    arch = model.stem.split("-")[0]
    draft = generated_model(model.with_name(f"{arch}-q4_k.gguf"), arch=arch, weight_type="q4_k", extra=ARCHS[arch])
    prompt = tokens(9, 40)
    flags = ("-np", "2", "-c", "1024", "-t", "2", "--tp", tp)
    plain = ServerProcess(*flags, model=model)
    try:
        expected = complete(plain, prompt, n=48, return_tokens=True)
    finally:
        assert plain.stop() == 0
    s = ServerProcess(*flags, "--spec-type", "draft-simple", "--model-draft", str(draft), model=model)
    try:
        drafted = [complete(s, prompt, n=48, return_tokens=True, cache_prompt=False, id_slot=i) for i in (0, 1, 0)]
    finally:
        assert s.stop() == 0
    assert "speculative decoding is off" not in s.log_text()
    for r in drafted:
        t = r["timings"]
        assert 0 < t["draft_n_accepted"] < t["draft_n"], t
        assert r["tokens"] == expected["tokens"]
        assert r["content"] == expected["content"]


def test_a_slot_saved_at_tp2_restores_at_tp1(model, tmp_path):
    flags = ("-np", "1", "-c", "1024", "--split-invariant", "--slot-save-path", str(tmp_path))
    prompt = tokens(7, 50)
    tp2 = ServerProcess(*flags, "--tp", "2", "-t", "2", model=model)
    try:
        first = complete(tp2, prompt, return_tokens=True)
        assert tp2.post("/slots/0?action=save", {"filename": "linear.bin"}).status_code == 200
        follow_up = prompt + first["tokens"] + tokens(8, 4)
        expected = complete(tp2, follow_up)
    finally:
        assert tp2.stop() == 0
    assert expected["tokens_cached"] > len(prompt)
    tp1 = ServerProcess(*flags, "-t", "1", model=model)
    try:
        r = tp1.post("/slots/0?action=restore", {"filename": "linear.bin"})
        assert r.status_code == 200, r.text
        warm = complete(tp1, follow_up)
        assert warm["tokens_cached"] == expected["tokens_cached"]
        assert warm["content"] == expected["content"]
    finally:
        assert tp1.stop() == 0
