"""The model's own multi-token-prediction layer as the draft
(--spec-type draft-mtp, as llama-server's): on Qwen 3.5's files with a
nextn layer, dense and with experts, at one split and two, several slots
at once, the answers are those of the server without drafts and the drafts
are counted as any drafter's. The layer's logits against upstream's are
checked in tests/models/test_mtp_head.cpp."""

import subprocess
import threading

import pytest

from mpi_server import MpiServer
from server_harness import ServerProcess, generated_model, parse_metrics, server_bin

SHAPE = ["--n-layer", "4", "--ssm-n-group", "4", "--ssm-dt-rank", "8", "--ssm-d-state", "64", "--nextn-layers", "1"]
ARCHS = {"qwen35": SHAPE, "qwen35moe": SHAPE + ["--n-expert", "4", "--n-expert-used", "2", "--n-ff-exp", "256"]}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def model(request, tmp_path_factory):
    arch = request.param
    return generated_model(tmp_path_factory.mktemp("mtp") / f"{arch}-q8_0.gguf", arch=arch, extra=ARCHS[arch])


def prompt(seed, n):
    return [300 + (seed * 7919 + i * 104729) % 20000 for i in range(n)]


def complete(server, tokens, n=40, **fields):
    body = {"prompt": tokens, "n_predict": n, "temperature": 0, "ignore_eos": True, "return_tokens": True, **fields}
    r = server.post("/completion", body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("tp", ["1", "2"])
def test_the_prediction_layer_drafts_without_changing_the_answer(model, tp):
    """Two slots drafting in the same steps, a prompt longer than a step's
    pairs and a second request on a slot that held another: the tokens of
    the server without drafts, every slot drafting, the counts in /metrics."""
    prompts = [prompt(1, 90), prompt(2, 20), prompt(3, 33)]
    flags = ("-np", "2", "-c", "2048", "-t", "2", "--tp", tp)
    plain = ServerProcess(*flags, model=model)
    try:
        expected = [complete(plain, p, cache_prompt=False) for p in prompts]
    finally:
        assert plain.stop() == 0
    s = ServerProcess(*flags, "--spec-type", "draft-mtp", "--metrics", model=model)
    try:
        log = s.log_text()
        results = [None, None]

        def run(i):
            results[i] = complete(s, prompts[i], id_slot=i)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        results.append(complete(s, prompts[2], id_slot=0))
        m = parse_metrics(s.get("/metrics").text)
        types = s.get("/props").json()["default_generation_settings"]["params"]["speculative.types"]
    finally:
        assert s.stop() == 0
    assert "speculative decoding: draft-mtp, up to 3 tokens a step" in log, log
    assert types == "draft-mtp"
    for got, want in zip(results, expected):
        assert got["tokens"] == want["tokens"]
        assert got["content"] == want["content"]
        assert got["timings"]["draft_n"] > 0, got["timings"]
    assert m["llamacpp:spec_decode_num_draft_tokens_total"] == sum(r["timings"]["draft_n"] for r in results)
    assert m["llamacpp:spec_decode_num_accepted_tokens_total"] == sum(
        r["timings"]["draft_n_accepted"] for r in results)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_prediction_layer_that_agrees_has_every_draft_confirmed(arch, tmp_path):
    """A model whose next token follows from the last alone and whose
    prediction layer proposes exactly that (llama-tp-make-model --bigram):
    every draft is confirmed, four tokens a step, on a recurrent target
    whose state never goes back, and the answer is the one without drafts."""
    model = generated_model(tmp_path / f"{arch}.gguf", arch=arch, extra=ARCHS[arch] + ["--bigram"])
    flags = ("-np", "1", "-c", "1024", "-t", "2", "--spec-draft-n-max", "3")
    plain = ServerProcess(*flags, model=model)
    try:
        expected = complete(plain, prompt(5, 24), n=61)
    finally:
        assert plain.stop() == 0
    s = ServerProcess(*flags, "--spec-type", "draft-mtp", model=model)
    try:
        got = complete(s, prompt(5, 24), n=61)
    finally:
        assert s.stop() == 0
    assert got["tokens"] == expected["tokens"]
    t = got["timings"]
    assert t["draft_n"] == 45 and t["draft_n_accepted"] == 45, t  # 15 steps of three drafts, then the last token


def test_a_model_without_a_prediction_layer_cannot_draft_with_one(tmp_path):
    plain = generated_model(tmp_path / "qwen35.gguf", arch="qwen35", extra=SHAPE[:-2])
    r = subprocess.run([str(server_bin()), "-m", str(plain), "--spec-type", "draft-mtp", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "speculative decoding" in r.stderr and "has no multi-token-prediction layer" in r.stderr, r.stderr


def test_process_zero_drafts_for_a_group_of_processes(tmp_path):
    """Two processes of one rank each: the target's hidden states are
    process 0's, and the prediction layer runs there whole."""
    model = generated_model(tmp_path / "qwen35.gguf", arch="qwen35", extra=SHAPE)
    args = ("-np", "2", "-c", "1024", "-t", "1")
    s = ServerProcess(*args, model=model)
    try:
        expected = complete(s, prompt(4, 30))
    finally:
        assert s.stop() == 0
    group = MpiServer(*args, "--spec-type", "draft-mtp", model=model)
    try:
        log = group.log_text()
        got = complete(group, prompt(4, 30))
    finally:
        assert group.stop() == 0, group.log_text()
    assert "tp 2 (allreduce mpi" in log and log.count("speculative decoding: draft-mtp") == 1, log
    assert got["tokens"] == expected["tokens"]
    assert got["timings"]["draft_n"] > 0
