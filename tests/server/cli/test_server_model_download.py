"""-hf, -hff, -mu and --offline as llama-server takes them: the model is
fetched from a hub on loopback (MODEL_ENDPOINT) into the cache (LLAMA_CACHE),
served from there, and found there again without the network."""

import os
import signal
import subprocess

import pytest

from model_hub import COMMIT, ModelHub
from server_harness import ServerProcess, free_port, generated_model, model_path, require_binary_and_model, server_bin

REPO = "example/stories-GGUF"


@pytest.fixture
def hub():
    h = ModelHub()
    model = model_path().read_bytes()
    # Only the Q8_0 file is a model: picking the wrong one fails to load.
    h.repos[REPO] = {"stories-Q8_0.gguf": model, "stories-F16.gguf": b"not a model" * 64,
                     "README.md": b"# stories\n"}
    h.files["/files/stories.gguf"] = model
    yield h
    h.close()


def environment(hub, cache):
    return {"MODEL_ENDPOINT": hub.endpoint, "LLAMA_CACHE": str(cache)}


def serve(env, *args):
    port = free_port()
    return ServerProcess("-t", "1", "-np", "1", "-c", "256", env=env,
                         leading_args=["--host", "127.0.0.1", "--port", str(port), *args], port=port)


def run(env, *args):
    require_binary_and_model()
    return subprocess.run([str(server_bin()), "--port", "0", "-t", "1", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def completes(server):
    r = server.post("/completion", {"prompt": "Once upon a time", "n_predict": 4, "temperature": 0})
    assert r.status_code == 200, r.text
    return r.json()["content"]


def cached_models(cache):
    return sorted(p.name for p in cache.rglob("*.gguf"))


def test_hf_downloads_the_tag_then_serves_it_offline(hub, tmp_path):
    env = environment(hub, tmp_path)
    s = serve(env, "-hf", REPO + ":Q8_0")
    try:
        answer = completes(s)
        # Named by its repository, as llama-server names it.
        assert s.get("/v1/models").json()["data"][0]["id"] == REPO + ":Q8_0"
    finally:
        assert s.stop() == 0
    log = s.log_text()
    assert "model: -hf " + REPO + ":Q8_0 is " in log, log
    assert hub.downloads == [f"/{REPO}/resolve/{COMMIT}/stories-Q8_0.gguf"]
    assert "stories-Q8_0.gguf" in cached_models(tmp_path)

    # Offline, the hub gone: the cache serves the same model.
    hub.close()
    s = serve(env, "-hf", REPO + ":Q8_0", "--offline")
    try:
        assert completes(s) == answer
    finally:
        assert s.stop() == 0


def test_hf_default_tag_and_environment_variables(hub, tmp_path):
    # No tag: Q4_K_M, else Q8_0, as llama-server; the repository from LLAMA_ARG_HF_REPO.
    s = serve({**environment(hub, tmp_path), "LLAMA_ARG_HF_REPO": REPO})
    try:
        completes(s)
    finally:
        assert s.stop() == 0
    assert len(hub.downloads) == 1 and hub.downloads[0].endswith("stories-Q8_0.gguf")


def test_hf_downloads_every_part_of_a_split_model(hub, tmp_path):
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    generated_model(parts_dir / "split-Q8_0.gguf", extra=["--split-max-size", "1M"])
    parts = sorted(parts_dir.glob("split-Q8_0-*-of-*.gguf"))
    assert len(parts) >= 2, parts
    hub.repos["example/split-GGUF"] = {p.name: p.read_bytes() for p in parts}
    s = serve(environment(hub, tmp_path / "cache"), "-hf", "example/split-GGUF:Q8_0")
    try:
        completes(s)
    finally:
        assert s.stop() == 0
    assert sorted(d.rsplit("/", 1)[1] for d in hub.downloads) == [p.name for p in parts]


def test_hf_file_picks_a_file(hub, tmp_path):
    r = run(environment(hub, tmp_path), "-hf", REPO, "-hff", "stories-F16.gguf")
    # The file is fetched, and the server then refuses it for what it is.
    assert r.returncode == 1, r.stderr
    assert "stories-F16.gguf" in r.stderr
    assert "failed to load model" in r.stderr
    r = run(environment(hub, tmp_path), "-hf", REPO, "-hff", "missing.gguf")
    assert r.returncode == 1
    assert "-hf " + REPO + " -hff missing.gguf: the repository has no file missing.gguf" in r.stderr, r.stderr


def test_unknown_repository_and_empty_offline_cache(hub, tmp_path):
    env = environment(hub, tmp_path)
    r = run(env, "-hf", "example/no-such-repo")
    assert r.returncode == 1
    assert "example/no-such-repo" in r.stderr and "no GGUF model found" in r.stderr
    r = run(env, "-hf", REPO, "--offline")
    assert r.returncode == 1
    assert "--offline" in r.stderr
    assert hub.downloads == []
    assert cached_models(tmp_path) == []


def test_model_url_into_the_cache_or_to_the_model_path(hub, tmp_path):
    env = environment(hub, tmp_path / "cache")
    url = hub.endpoint + "files/stories.gguf"
    s = serve(env, "-mu", url)
    try:
        completes(s)
    finally:
        assert s.stop() == 0
    assert (tmp_path / "cache" / "stories.gguf").read_bytes() == model_path().read_bytes()

    target = tmp_path / "models" / "saved.gguf"
    s = serve(env, "-mu", url, "-m", str(target))
    try:
        completes(s)
    finally:
        assert s.stop() == 0
    assert target.read_bytes() == model_path().read_bytes()
    assert len(hub.downloads) == 2

    r = run(env, "-mu", hub.endpoint + "files/missing.gguf")
    assert r.returncode == 1
    assert "-mu " + hub.endpoint + "files/missing.gguf" in r.stderr


def test_a_signal_stops_a_download_and_the_server(hub, tmp_path):
    hub.slow = True
    env = environment(hub, tmp_path)
    proc = subprocess.Popen([str(server_bin()), "--port", "0", "-t", "1", "-hf", REPO + ":Q8_0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **env})
    try:
        assert hub.started.wait(30), "the download did not start"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert "download interrupted" in out, out
    assert hub.downloads == []
    assert cached_models(tmp_path) == []
    assert not list(tmp_path.rglob("*.downloadInProgress"))


def test_no_model_at_all_starts_a_router_over_the_empty_cache(tmp_path):
    """As llama-server without arguments: a router that lists nothing and says how to give a model."""
    port = free_port()
    router = ServerProcess(env={"LLAMA_CACHE": str(tmp_path)},
                           leading_args=["--host", "127.0.0.1", "--port", str(port)], port=port)
    try:
        assert router.get("/v1/models").json()["data"] == []
        r = router.post("/v1/chat/completions", {"model": "example/none:Q8_0",
                                                 "messages": [{"role": "user", "content": "hi"}]})
        assert r.status_code == 400 and "not found" in r.json()["error"]["message"], r.text
        log = router.log_text()
        assert "0 models in llama-server's cache" in log and "-m FILE, -hf REPO" in log, log
    finally:
        assert router.stop() == 0


def test_without_a_model_the_router_serves_the_cache(hub, tmp_path):
    env = environment(hub, tmp_path)
    s = serve(env, "-hf", REPO + ":Q8_0")
    try:
        answer = completes(s)
    finally:
        assert s.stop() == 0
    # No model given: a router over the cache, each model named USER/REPO:TAG, as llama-server.
    port = free_port()
    router = ServerProcess("-t", "1", "-np", "1", "-c", "256", env=env,
                           leading_args=["--host", "127.0.0.1", "--port", str(port)], port=port)
    try:
        assert [m["id"] for m in router.get("/v1/models").json()["data"]] == [REPO + ":Q8_0"]
        r = router.post("/completion", {"model": REPO + ":Q8_0", "prompt": "Once upon a time", "n_predict": 4,
                                        "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["content"] == answer
    finally:
        assert router.stop() == 0


def test_hfd_fetches_the_draft_model(hub, tmp_path):
    """-hfd as llama-server's: the draft model from the hub, into the same cache."""
    env = environment(hub, tmp_path)
    s = serve(env, "-m", str(model_path()), "-hfd", REPO + ":Q8_0")
    try:
        r = s.post("/completion", {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0,
                                   "ignore_eos": True})
        assert r.status_code == 200, r.text
        # The model as its own draft: every proposal confirmed.
        t = r.json()["timings"]
        assert t["draft_n_accepted"] == t["draft_n"] > 0, t
    finally:
        assert s.stop() == 0
    log = s.log_text()
    assert "model: -hfd " + REPO + ":Q8_0 is " in log, log
    assert "speculative decoding: draft-simple" in log, log
    assert hub.downloads == [f"/{REPO}/resolve/{COMMIT}/stories-Q8_0.gguf"]

    r = run(env, "-m", str(model_path()), "-hfd", "nobody/missing-GGUF")
    assert r.returncode == 1 and "-hfd nobody/missing-GGUF" in r.stderr, r.stderr


def test_dedup_cache_models_hides_the_cached_entry_a_preset_stands_for(hub, tmp_path):
    env = environment(hub, tmp_path / "cache")
    s = serve(env, "-hf", REPO + ":Q8_0")  # into the cache
    try:
        answer = completes(s)
    finally:
        assert s.stop() == 0
    listed = {}
    for dedup in ("0", "1"):
        ini = tmp_path / f"presets-{dedup}.ini"
        ini.write_text(f"[*]\ndedup-cache-models = {dedup}\n\n[stories]\nhf-repo = {REPO}:Q8_0\n")
        port = free_port()
        router = ServerProcess("-t", "1", "-np", "1", "-c", "256", env=env,
                               leading_args=["--host", "127.0.0.1", "--port", str(port), "--models-preset",
                                             str(ini)], port=port)
        try:
            listed[dedup] = sorted(m["id"] for m in router.get("/v1/models").json()["data"])
            # Hidden from the list, still served by its name.
            r = router.post("/completion", {"model": REPO + ":Q8_0", "prompt": "Once upon a time", "n_predict": 4,
                                            "temperature": 0})
            assert r.status_code == 200, r.text
            assert r.json()["content"] == answer
        finally:
            assert router.stop() == 0
    assert listed == {"0": sorted([REPO + ":Q8_0", "stories"]), "1": ["stories"]}


def preset_server(env, preset, *later):
    """A preset first, the test's host and port after it (a later flag wins, as in llama-server)."""
    port = free_port()
    return ServerProcess("-t", "1", "-np", "1", "-c", "256", env=env,
                         leading_args=[preset, "--host", "127.0.0.1", "--port", str(port), *later], port=port)


def test_llama_servers_model_presets_fetch_their_models(hub, tmp_path):
    model = model_path().read_bytes()
    hub.repos["ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF"] = {"qwen2.5-coder-7b-q8_0.gguf": model}
    hub.repos["ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF"] = {"qwen2.5-coder-0.5b-q8_0.gguf": model}
    env = environment(hub, tmp_path)
    s = preset_server(env, "--fim-qwen-7b-spec")
    try:
        r = s.post("/completion", {"prompt": "Once upon a time", "n_predict": 16, "temperature": 0,
                                   "ignore_eos": True})
        assert r.status_code == 200, r.text
        t = r.json()["timings"]
        assert t["draft_n_accepted"] == t["draft_n"] > 0, t  # the same file as target and draft
    finally:
        assert s.stop() == 0
    log = s.log_text()
    assert "has no effect" not in log, log
    assert "model: -hf ggml-org/Qwen2.5-Coder-7B-Q8_0-GGUF -hff qwen2.5-coder-7b-q8_0.gguf is " in log, log
    assert "model: -hfd ggml-org/Qwen2.5-Coder-0.5B-Q8_0-GGUF -md qwen2.5-coder-0.5b-q8_0.gguf is " in log, log
    # The preset's batch; its port 8012 overridden by the later --port.
    assert "batch 1024" in log, log


def test_the_spec_default_preset_drafts_with_ngram_mod():
    s = ServerProcess("-t", "1", "--spec-default")
    try:
        log = s.log_text()
        assert "speculative decoding: ngram-mod, up to 64 tokens a step" in log, log
    finally:
        assert s.stop() == 0
