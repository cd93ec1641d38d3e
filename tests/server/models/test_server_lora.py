"""LoRA adapters as llama-server serves them: --lora / --lora-scaled /
--lora-init-without-apply, GET and POST /lora-adapters, a request's own
`lora` list (unlisted adapters at 0), requests with different adapters in
one batch, the prompt cache kept apart per adapter scales, and --tp 2
giving one device's answers."""

import subprocess
import threading

import pytest

from server_harness import ServerProcess, assert_error, generated_model, server_bin

PROMPT = "Once upon a time there was a little"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    model = generated_model(d / "llama-q8_0.gguf")
    adapters = []
    for seed, rank in ((3, 8), (4, 4)):
        path = d / f"adapter-{seed}.gguf"
        subprocess.run([str(server_bin().parent / "llama-tp-make-model"), "--lora-of", str(model), "--seed",
                        str(seed), "--lora-rank", str(rank), "-o", str(path)], check=True, capture_output=True,
                       timeout=120)
        adapters.append(path)
    return model, adapters


def serve(model, *args):
    return ServerProcess("-np", "2", "-c", "1024", "-t", "2", *args, model=model)


def complete(server, lora=None, prompt=PROMPT, n=16):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True}
    if lora is not None:
        body["lora"] = lora
    r = server.post("/completion", body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def plain(files):
    """Answers of the model alone."""
    model, _ = files
    s = serve(model)
    try:
        yield complete(s)["content"]
    finally:
        assert s.stop() == 0


@pytest.fixture(scope="module")
def server(files):
    model, (a, b) = files
    s = serve(model, "--lora", str(a), "--lora-scaled", f"{b}:0.5")
    yield s
    assert s.stop() == 0, s.log_text()


def test_adapters_are_listed_with_their_scales(server, files):
    _, (a, b) = files
    got = server.get("/lora-adapters").json()
    assert got == [{"id": 0, "path": str(a), "scale": 1.0, "task_name": "", "prompt_prefix": ""},
                   {"id": 1, "path": str(b), "scale": 0.5, "task_name": "", "prompt_prefix": ""}]


def test_a_request_picks_its_adapters(server, plain):
    both = complete(server)["content"]
    assert both != plain, "the adapters change nothing"
    # Unlisted adapters are at 0; an empty list, like none, takes the
    # global scales (llama-server's reading).
    assert complete(server, [])["content"] == both
    assert complete(server, [{"id": 1, "scale": 0}])["content"] == plain
    only_a = complete(server, [{"id": 0, "scale": 1.0}])["content"]
    assert only_a not in (plain, both)
    listed = complete(server, [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}])
    assert listed["content"] == both
    # Echoed in the settings, as llama-server's.
    assert listed["generation_settings"]["lora"] == [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}]
    assert complete(server)["generation_settings"]["lora"] == []


def test_generated_tokens_take_the_adapter_as_prompt_tokens_do(server):
    lora = [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}]
    r = server.post("/completion", {"prompt": PROMPT, "n_predict": 8, "temperature": 0, "ignore_eos": True,
                                    "return_tokens": True, "lora": lora})
    assert r.status_code == 200, r.text
    generated = r.json()["tokens"]
    prompt = server.post("/tokenize", {"content": PROMPT, "add_special": True}).json()["tokens"]
    # Each next token again, its predecessors given as the prompt.
    for k in (1, 4, 7):
        r = server.post("/completion", {"prompt": prompt + generated[:k], "n_predict": 1, "temperature": 0,
                                        "return_tokens": True, "cache_prompt": False, "lora": lora})
        assert r.json()["tokens"] == [generated[k]], k


def test_a_cached_prompt_is_reused_only_under_the_same_scales(server):
    first = complete(server, [{"id": 0, "scale": 1.0}])
    again = complete(server, [{"id": 0, "scale": 1.0}])
    assert again["tokens_cached"] > 0 and again["content"] == first["content"]
    other = complete(server, [{"id": 0, "scale": 0.25}])
    assert other["tokens_cached"] == 0
    # Both slots now hold the prompt, under different scales: each request
    # finds its own, never the other's.
    assert complete(server, [{"id": 0, "scale": 1.0}])["content"] == first["content"]
    assert complete(server, [{"id": 0, "scale": 0.25}])["content"] == other["content"]


def test_requests_with_different_adapters_share_a_batch(server, plain):
    solo = {k: complete(server, lora, prompt=f"{PROMPT} {k}")["content"]
            for k, lora in (("a", [{"id": 0, "scale": 1}]), ("none", [{"id": 1, "scale": 0}]))}
    got = {}

    def run(k, lora):
        got[k] = complete(server, lora, prompt=f"{PROMPT} {k}", n=24)["content"][:len(solo[k])]

    threads = [threading.Thread(target=run, args=("a", [{"id": 0, "scale": 1}])),
               threading.Thread(target=run, args=("none", [{"id": 1, "scale": 0}]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == solo


def test_global_scales_are_set_by_post(server, plain, files):
    before = complete(server)["content"]
    r = server.post("/lora-adapters", [{"id": 0, "scale": 0.0}])
    assert r.status_code == 200 and r.json() == {"success": True}
    try:
        assert [a["scale"] for a in server.get("/lora-adapters").json()] == [0.0, 0.0]
        assert complete(server)["content"] == plain
    finally:
        server.post("/lora-adapters", [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}])
    assert complete(server)["content"] == before


def test_bad_lora_lists_are_refused(server):
    for bad in ([{"id": 2, "scale": 1}], [{"scale": 1}], {"id": 0}, [{"id": 0, "scale": "high"}],
                [{"id": 0, "scale": 1e39}]):
        r = server.post("/completion", {"prompt": PROMPT, "n_predict": 2, "lora": bad})
        assert_error(r, 400, param="lora")
        r = server.post("/lora-adapters", bad)
        assert r.status_code == 400, r.text
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                             "lora": [{"id": 5, "scale": 1}]})
    assert_error(r, 400, param="lora")
    assert "adapters are 0 to 1" in r.json()["error"]["message"]


def test_without_adapters_a_lora_list_names_the_flag(plain, files):
    model, _ = files
    s = serve(model)
    try:
        r = s.post("/completion", {"prompt": PROMPT, "n_predict": 2, "lora": [{"id": 0, "scale": 1}]})
        assert_error(r, 400, param="lora")
        assert "--lora" in r.json()["error"]["message"]
        assert s.get("/lora-adapters").json() == []
    finally:
        assert s.stop() == 0


def test_init_without_apply_starts_at_zero(files, plain):
    model, (a, _) = files
    s = serve(model, "--lora", str(a), "--lora-init-without-apply")
    try:
        assert s.get("/lora-adapters").json()[0]["scale"] == 0.0
        assert complete(s)["content"] == plain
        assert complete(s, [{"id": 0, "scale": 1}])["content"] != plain
    finally:
        assert s.stop() == 0


def test_two_ranks_answer_as_one_device(files, server):
    model, (a, b) = files
    expected = complete(server)["content"]
    s = serve(model, "--lora", str(a), "--lora-scaled", f"{b}:0.5", "--tp", "2")
    try:
        assert complete(s)["content"] == expected
    finally:
        assert s.stop() == 0


def test_an_adapter_for_another_model_stops_the_server(files, tmp_path):
    model, _ = files
    other = generated_model(tmp_path / "other.gguf", seed=9, extra=["--n-layer", "3"])
    adapter = tmp_path / "other-lora.gguf"
    subprocess.run([str(server_bin().parent / "llama-tp-make-model"), "--lora-of", str(other),
                    "-o", str(adapter)], check=True, capture_output=True, timeout=120)
    r = subprocess.run([str(server_bin()), "-m", str(model), "--port", "0", "-t", "1", "--lora", str(adapter)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert "LoRA adapter '" + str(adapter) + "'" in r.stderr and "blk.2" in r.stderr, r.stderr
