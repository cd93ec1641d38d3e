"""Speculative decoding as llama-server's: a draft model (-md, draft-simple)
or the slot's own tokens (--spec-type ngram-simple, ngram-map-k,
ngram-map-k4v, ngram-mod, ngram-cache) propose tokens, one step
of the target checks them, and every token is still sampled from the
target's logits: the answers are those of a server without drafts, only the
speed and the draft counts (timings.draft_n, /metrics) differ."""

import subprocess
import threading

import pytest

from server_harness import ServerProcess, generated_model, model_path, server_bin
from server_harness import parse_metrics
from mpi_server import MpiServer

PROMPT = "Once upon a time there was a little"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A generated f32 target, the same weights in q4_0 (a draft that mostly
    agrees) and another seed (one that almost never does)."""
    d = tmp_path_factory.mktemp("spec")
    target = generated_model(d / "target.gguf", seed=7, weight_type="f32")
    close = generated_model(d / "close.gguf", seed=7, weight_type="q4_0")
    other = generated_model(d / "other.gguf", seed=8, weight_type="f32")
    return target, close, other


def complete(s, prompt=PROMPT, n=64, **fields):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True, "return_tokens": True,
            "n_probs": 2, **fields}
    if n is None:
        del body["n_predict"]  # until the slot's context is full
    r = s.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()


def answer(model, *args, **fields):
    s = ServerProcess("-np", "2", "-c", "1024", "-t", "2", *args, model=model)
    try:
        return complete(s, **fields), s.log_text()
    finally:
        assert s.stop() == 0


def same_answer(a, b, tolerance=2e-2):
    """The same tokens, and logprobs within what rounding moves: a step
    checking drafts computes several rows at once, which ggml's products and
    the f16 cache's rounding place apart from a lone row's (5e-6 with an f32
    cache, up to 1e-2 with f16 on stories260K; -kvu's ggml attention the same)."""
    assert a["tokens"] == b["tokens"]
    assert a["content"] == b["content"]
    for pa, pb in zip(a["completion_probabilities"], b["completion_probabilities"]):
        for x, y in zip(pa["top_logprobs"], pb["top_logprobs"]):
            assert x["id"] == y["id"] and abs(x["logprob"] - y["logprob"]) < tolerance, (x, y)


def test_a_draft_model_changes_the_speed_not_the_answer(models):
    target, close, other = models
    plain, _ = answer(target)
    assert "draft_n" not in plain["timings"]
    mostly, log = answer(target, "-md", close)
    assert "speculative decoding: draft-simple, up to 3 tokens a step" in log, log
    same_answer(plain, mostly)
    t = mostly["timings"]
    # Some drafts confirmed, some not: both paths of every step were taken.
    assert 0 < t["draft_n_accepted"] < t["draft_n"], t
    assert t["predicted_n"] == 64
    rarely, _ = answer(target, "-md", other, "--spec-draft-n-max", "5")
    same_answer(plain, rarely)
    assert rarely["timings"]["draft_n"] > 0
    assert rarely["timings"]["draft_n_accepted"] < rarely["timings"]["draft_n"] // 4
    # The model as its own draft: every draft confirmed.
    itself, _ = answer(target, "--spec-type", "draft-simple", "--model-draft", target)
    same_answer(plain, itself)
    assert itself["timings"]["draft_n_accepted"] == itself["timings"]["draft_n"] > 0


def test_ngrams_of_the_slots_own_text_on_a_real_model():
    """stories260K repeats its phrases: the n-grams it has written propose the next ones."""
    plain, _ = answer(model_path(), n=256)
    spec, log = answer(model_path(), "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
                       "--spec-ngram-simple-size-m", "8", n=256)
    assert "speculative decoding: ngram-simple, up to 8 tokens a step" in log, log
    same_answer(plain, spec)
    assert spec["timings"]["draft_n_accepted"] > 0, spec["timings"]
    # With an f32 cache only the products' rounding remains.
    f32 = ["-ctk", "f32", "-ctv", "f32"]
    plain, _ = answer(model_path(), *f32, n=256)
    spec, _ = answer(model_path(), *f32, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", n=256)
    same_answer(plain, spec, tolerance=1e-4)


def test_the_draft_model_follows_the_slots_and_the_tensor_parallel_target(models):
    target, close, _ = models
    prompts = [PROMPT, "The quick brown fox", "In a land far away"]
    lengths = [40, 40, None]  # the last one to the end of its slot's context
    s = ServerProcess("-np", "3", "-c", "1536", "-t", "2", "--split-invariant", model=target)
    try:
        expected = [complete(s, p, n=n) for p, n in zip(prompts, lengths)]
    finally:
        assert s.stop() == 0
    s = ServerProcess("-np", "3", "-c", "1536", "-t", "2", "--split-invariant", "--tp", "2", "-md", close,
                      "--metrics", model=target)
    try:
        results = [None] * 3

        def run(i):
            results[i] = complete(s, prompts[i], n=lengths[i])

        # Three slots drafting in the same steps, then one slot reused by a
        # new prompt (the draft's cache drops what it no longer shares).
        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for got, want in zip(results, expected):
            same_answer(want, got)
            assert got["timings"]["draft_n"] > 0, got["timings"]  # every slot drafted
        assert results[2]["stop_type"] == "limit" and results[2]["tokens_predicted"] > 400
        again = complete(s, prompts[1] + " jumps", n=40, id_slot=0)
        assert again["timings"]["draft_n"] > 0
        m = parse_metrics(s.get("/metrics").text)
        drafted = sum(r["timings"]["draft_n"] for r in results + [again])
        accepted = sum(r["timings"]["draft_n_accepted"] for r in results + [again])
        assert m["llamacpp:spec_decode_num_draft_tokens_total"] == drafted
        assert m["llamacpp:spec_decode_num_accepted_tokens_total"] == accepted
        assert m["llamacpp:spec_decode_num_drafts_total"] > 0
        # Per draft position, as llama-server: a draft with k confirmed tokens counts at positions 0..k-1.
        series = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        per_pos = [m[f'{series}{{position="{i}"}}'] for i in range(sum(k.startswith(series) for k in m))]
        assert per_pos and sum(per_pos) == accepted, per_pos
        assert all(a >= b for a, b in zip(per_pos, per_pos[1:])), per_pos
        slots = s.get("/slots").json()
        assert all(slot["speculative"] for slot in slots)
        assert s.get("/props").json()["default_generation_settings"]["params"]["speculative.types"] == "draft-simple"
        assert again["generation_settings"]["speculative.types"] == "draft-simple"
    finally:
        assert s.stop() == 0


def test_process_zero_drafts_for_a_group_of_processes(models):
    target, close, _ = models
    args = ("-np", "2", "-c", "1024", "--split-invariant")
    s = ServerProcess(*args, "--tp", "2", "-t", "2", model=target)
    try:
        expected = complete(s, n=32)
    finally:
        assert s.stop() == 0
    group = MpiServer(*args, "-t", "1", "-md", close, model=target)
    try:
        log = group.log_text()
        got = complete(group, n=32)
    finally:
        assert group.stop() == 0, group.log_text()
    assert "tp 2 (allreduce mpi" in log and log.count("speculative decoding: draft-simple") == 1, log
    same_answer(expected, got)
    assert got["timings"]["draft_n_accepted"] > 0


def test_drafts_stay_inside_the_slot_and_the_request(models):
    target, close, _ = models
    small = ["-np", "1", "-c", "48", "-t", "2"]
    s = ServerProcess(*small, model=target)
    try:
        plain = complete(s, n=200)
        short = complete(s, n=5)
    finally:
        assert s.stop() == 0
    assert plain["stop_type"] == "limit" and plain["tokens_predicted"] < 48
    s = ServerProcess(*small, "-md", close, "--spec-draft-n-max", "8", model=target)
    try:
        # The context's end: drafts never reach past the slot's last cell.
        got = complete(s, n=200)
        same_answer(plain, got)
        assert got["tokens_predicted"] == plain["tokens_predicted"]
        # n_predict: no more tokens than asked, though the drafts run ahead.
        got = complete(s, n=5)
        same_answer(short, got)
        assert got["tokens_predicted"] == 5
    finally:
        assert s.stop() == 0


def test_a_context_shift_and_a_stop_in_the_middle_of_drafts(models):
    target, close, _ = models
    small = ["-np", "1", "-c", "48", "-t", "2", "--context-shift"]
    s = ServerProcess(*small, model=target)
    try:
        shifted = complete(s, n=120)
    finally:
        assert s.stop() == 0
    # The draft's cache catches up with the shifted slot.
    s = ServerProcess(*small, "-md", close, "--spec-draft-n-max", "4", model=target)
    try:
        got = complete(s, n=120)
        same_answer(shifted, got)
        assert got["tokens_predicted"] == 120
    finally:
        assert s.stop() == 0
    # The real model ends its story (EOS) and meets stop words inside confirmed drafts.
    fields = {"ignore_eos": False, "n": 400}
    plain, _ = answer(model_path(), **fields)
    spec, _ = answer(model_path(), "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", **fields)
    same_answer(plain, spec)
    assert spec["stop_type"] == plain["stop_type"]
    words = plain["content"].split()
    stop = " ".join(words[len(words) // 2:len(words) // 2 + 2])
    plain, _ = answer(model_path(), stop=[stop], **fields)
    spec, _ = answer(model_path(), "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3", stop=[stop],
                     **fields)
    assert plain["stop_type"] == "word" and plain["stopping_word"] == stop
    same_answer(plain, spec)
    assert (spec["stop_type"], spec["stopping_word"]) == ("word", stop)


def test_p_min_and_n_min_drop_proposals(models):
    target, close, _ = models
    plain, _ = answer(target, n=24)
    # Among the top ten the first is never certain; and no proposal is 4 long when at most 3 are made.
    for args in (["--spec-draft-p-min", "1"], ["--spec-draft-n-min", "4"]):
        got, _ = answer(target, "-md", close, *args, n=24)
        same_answer(plain, got)
        assert "draft_n" not in got["timings"], (args, got["timings"])


def run(*args):
    return subprocess.run([str(server_bin()), "--port", "0", "-t", "1", *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def test_a_draft_model_that_cannot_draft_stops_the_server(models, tmp_path):
    target, _, _ = models
    missing = tmp_path / "none.gguf"
    r = run("-m", target, "-md", missing)
    assert r.returncode == 1 and "speculative decoding" in r.stderr and str(missing) in r.stderr, r.stderr
    qwen = generated_model(tmp_path / "qwen.gguf", arch="qwen2")
    r = run("-m", target, "-md", qwen)
    assert r.returncode == 1, r.stderr
    assert f"draft model {qwen} cannot draft for this model" in r.stderr, r.stderr


@pytest.mark.parametrize("args,expected", [
    (["--spec-type", "draft-simple"], "--spec-type draft-simple: no draft model (-md FILE or -hfd REPO)"),
    (["--spec-type", "draft-mtp", "-md", "head.gguf"], "a separate head file (-md) is not supported"),
    (["--spec-type", "ngram-nonsense"], "--spec-type"),
    (["--spec-draft-p-min", "2", "--spec-type", "ngram-simple"], "--spec-draft-p-min: 2 is out of range"),
    (["--spec-draft-n-max", "-1"], "--spec-draft-n-max"),
    (["--draft-max", "4"], "use --spec-draft-n-max"),
])
def test_bad_speculative_flags_are_usage_errors(args, expected):
    r = run("-m", model_path(), *args)
    assert r.returncode == 2 and expected in r.stderr, r.stderr


@pytest.mark.parametrize("kind,settings", [
    ("ngram-map-k", ["--spec-ngram-map-k-size-n", "3", "--spec-ngram-map-k-size-m", "8"]),
    ("ngram-map-k4v", ["--spec-ngram-map-k4v-size-n", "3", "--spec-ngram-map-k4v-size-m", "8"]),
    ("ngram-mod", ["--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "1", "--spec-ngram-mod-n-max", "8"]),
])
def test_libcommons_other_ngram_kinds_on_a_real_model(kind, settings):
    """The kinds llama-server drafts with through libcommon, with their own
    settings: the same answer, some drafts confirmed."""
    plain, _ = answer(model_path(), n=256)
    spec, log = answer(model_path(), "--spec-type", kind, *settings, n=256)
    assert f"speculative decoding: {kind}, up to 8 tokens a step" in log, log
    same_answer(plain, spec)
    assert spec["timings"]["draft_n_accepted"] > 0, spec["timings"]


def test_a_lookup_cache_that_cannot_be_read_stops_the_server(tmp_path):
    missing = tmp_path / "static.bin"
    r = run("-m", model_path(), "--spec-type", "ngram-cache", "-lcs", missing)
    assert r.returncode == 1, r.stderr
    assert f"--lookup-cache-static {missing}: cannot read the lookup cache" in r.stderr, r.stderr


def test_kinds_not_implemented_are_named_and_ignored():
    s = ServerProcess("-t", "1", "--spec-type", "draft-eagle3,ngram-simple,ngram-mod")
    try:
        log = s.log_text()
        assert "--spec-type draft-eagle3 has no effect in llama-tp-server" in log, log
        assert "speculative decoding: ngram-simple,ngram-mod" in log, log
        types = s.get("/props").json()["default_generation_settings"]["params"]["speculative.types"]
        assert types == "ngram-simple,ngram-mod"
    finally:
        assert s.stop() == 0
