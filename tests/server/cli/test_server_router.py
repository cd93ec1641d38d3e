"""Router mode: llama-tp-server with --models-dir and no model serves the
folder's models, each in a child llama-tp-server started on demand, as
llama-server's router does: the model list with statuses, /models/load and
/models/unload, requests forwarded by their "model" (streaming too),
--models-max making room, --no-models-autoload, the API key at the router,
and children that end with it."""

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from server_harness import ServerProcess, free_port, model_path, require_binary_and_model, server_bin


@pytest.fixture
def models_dir(tmp_path):
    d = tmp_path / "models"
    (d / "sub").mkdir(parents=True)
    shutil.copy(model_path(), d / "stories.gguf")
    shutil.copy(model_path(), d / "sub" / "model.gguf")
    shutil.copy(model_path(), d / "mmproj-stories.gguf")  # a projector: not a model
    shutil.copy(model_path(), d / "big-00001-of-00002.gguf")
    shutil.copy(model_path(), d / "big-00002-of-00002.gguf")  # a later part: not a model
    (d / "broken.gguf").write_bytes(b"not a gguf file")
    (d / "empty").mkdir()  # a folder without a model
    return d


def router(models_dir, *extra, **kw):
    port = free_port()
    return ServerProcess(*extra, leading_args=["--models-dir", str(models_dir), "--host", "127.0.0.1", "--port",
                                               str(port), "-c", "512", "-np", "1", "-t", "1"], port=port, **kw)


def statuses(s):
    return {m["id"]: m["status"] for m in s.get("/v1/models").json()["data"]}


def wait_status(s, model, value, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if statuses(s)[model]["value"] == value:
            return
        time.sleep(0.05)
    pytest.fail(f"{model} did not become {value}: {statuses(s)[model]}")


def chat(s, model, stream=False, **kw):
    body = {"model": model, "messages": [{"role": "user", "content": "Once upon a time"}], "max_tokens": 12,
            "temperature": 0, "stream": stream}
    return s.post("/v1/chat/completions", body, stream=stream, **kw)


def children(models_dir):
    """pids of processes whose command line serves a model of the folder."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and b"--model" in cmd and any(str(models_dir).encode() in c for c in cmd):
            pids.append(int(entry.name))
    return pids


def test_the_folder_models_are_listed_unloaded(models_dir):
    s = router(models_dir)
    try:
        st = statuses(s)
        # As llama-server lists them: a top-level split model's later parts too.
        assert sorted(st) == ["big-00001-of-00002", "big-00002-of-00002", "broken", "stories", "sub"]
        assert all(v["value"] == "unloaded" for v in st.values())
        args = st["stories"]["args"]
        assert args[args.index("--model") + 1] == str(models_dir / "stories.gguf")
        assert "--models-dir" not in args and args[args.index("--alias") + 1] == "stories"
        props = s.get("/props").json()
        assert props["role"] == "router" and props["max_instances"] == 4 and props["models_autoload"] is True
        # As llama-server's router without --tools / --webui-mcp-proxy.
        for r in (s.post("/tools", {}), s.get("/cors-proxy")):
            assert r.status_code == 403 and r.json()["error"]["type"] == "feature_disabled", r.text
    finally:
        assert s.stop() == 0


def test_a_request_starts_its_model_and_gets_its_answers(models_dir):
    direct = ServerProcess("-c", "512", "-np", "1", "-t", "1")
    try:
        want = chat(direct, "x").json()["choices"][0]["message"]["content"]
    finally:
        assert direct.stop() == 0
    s = router(models_dir)
    try:
        r = chat(s, "stories")
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == want
        assert r.json()["model"] == "stories"
        assert statuses(s)["stories"]["value"] == "loaded"
        r = chat(s, "stories", stream=True)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        text, done = "", False
        for line in r.iter_lines():
            if line == b"data: [DONE]":
                done = True
            elif line.startswith(b"data: "):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                text += delta.get("content") or ""
        assert done and text == want
        # GET routes name the model in the query.
        assert s.get("/props?model=stories").json()["model_alias"] == "stories"
        assert s.get("/slots?model=stories").status_code == 200
    finally:
        assert s.stop() == 0


def test_models_max_stops_the_least_recently_used(models_dir):
    s = router(models_dir, "--models-max", "1")
    try:
        assert chat(s, "stories").status_code == 200
        assert chat(s, "sub").status_code == 200
        st = statuses(s)
        assert st["sub"]["value"] == "loaded" and st["stories"]["value"] == "unloaded"
        assert "failed" not in st["stories"]  # stopped, not failed
    finally:
        assert s.stop() == 0


def test_load_and_unload(models_dir):
    s = router(models_dir)
    try:
        r = s.post("/models/load", {"model": "sub"})
        assert r.status_code == 200 and r.json() == {"success": True}
        assert s.post("/models/load", {"model": "sub"}).json()["error"]["message"] == "model is already running"
        wait_status(s, "sub", "loaded")
        assert s.post("/models/unload", {"model": "sub"}).json() == {"success": True}
        wait_status(s, "sub", "unloaded")
        r = s.post("/models/unload", {"model": "sub"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "model is not running"
        r = s.post("/models/load", {"model": "nope"})
        assert r.status_code == 404 and r.json()["error"]["message"] == "model is not found"
    finally:
        assert s.stop() == 0


def test_bad_requests_and_a_model_that_fails_to_load(models_dir):
    s = router(models_dir)
    try:
        r = s.post("/v1/chat/completions", {"messages": []})
        assert r.status_code == 400 and r.json()["error"]["message"] == "model name is missing from the request"
        r = chat(s, "nope")
        assert r.status_code == 400 and r.json()["error"]["message"] == "model 'nope' not found"
        r = chat(s, "broken")
        assert r.status_code == 500 and r.json()["error"]["message"] == "model name=broken failed to load"
        st = statuses(s)["broken"]
        assert st["value"] == "unloaded" and st["failed"] is True and st["exit_code"] == 1
        assert chat(s, "stories").status_code == 200  # the others still serve
    finally:
        assert s.stop() == 0


def test_without_autoload_a_model_must_be_loaded_first(models_dir):
    s = router(models_dir, "--no-models-autoload")
    try:
        r = chat(s, "stories")
        assert r.status_code == 400 and r.json()["error"]["message"] == "model is not loaded"
        assert s.get("/props?model=stories&autoload=true").status_code == 200
        assert chat(s, "stories").status_code == 200
    finally:
        assert s.stop() == 0


def test_the_router_checks_the_api_key_and_its_children_do_not(models_dir):
    s = router(models_dir, api_key="secret")
    try:
        assert requests.get(s.base + "/v1/models", timeout=10).status_code == 401
        assert requests.get(s.base + "/health", timeout=10).status_code == 200
        r = chat(s, "stories")
        assert r.status_code == 200, r.text
        assert "--api-key" not in statuses(s)["stories"]["args"]
    finally:
        assert s.stop() == 0


def test_children_end_with_the_router(models_dir):
    s = router(models_dir)
    assert chat(s, "stories").status_code == 200
    assert chat(s, "sub").status_code == 200
    assert len(children(models_dir)) == 2
    assert s.stop() == 0
    deadline = time.time() + 10
    while children(models_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert children(models_dir) == []


def test_children_end_when_the_router_is_killed(models_dir):
    s = router(models_dir)
    assert chat(s, "stories").status_code == 200
    assert len(children(models_dir)) == 1
    s.proc.kill()
    s.proc.wait()
    deadline = time.time() + 10
    while children(models_dir) and time.time() < deadline:
        time.sleep(0.1)
    assert children(models_dir) == []
    s.stop()


def test_presets_add_options_and_models(models_dir, tmp_path):
    ini = tmp_path / "presets.ini"
    ini.write_text(f"""; llama-server's preset format
[*]
n-predict = 3

[stories]
ctx-size = 300

[custom]
model = {models_dir / "stories.gguf"}
load-on-startup = true
stop-timeout = 2
""")
    s = router(models_dir, "--models-preset", str(ini))
    try:
        wait_status(s, "custom", "loaded")  # started with the router
        st = statuses(s)
        args = st["stories"]["args"]
        assert args[args.index("--n-predict") + 1] == "3" and args[args.index("--ctx-size") + 1] == "300"
        # The router's own flags win over a preset's: -c 512.
        assert s.get("/props?model=stories").json()["default_generation_settings"]["n_ctx"] == 512
        r = s.post("/v1/chat/completions", {"model": "custom", "messages": [{"role": "user", "content": "Once"}],
                                            "temperature": 0})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3, r.text
    finally:
        assert s.stop() == 0


def test_bad_folders_and_presets_are_refused(models_dir, tmp_path):
    require_binary_and_model()
    r = subprocess.run([str(server_bin()), "--models-dir", str(models_dir / "missing")], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 1 and "--models-dir" in r.stderr and "does not exist" in r.stderr, r.stderr
    ini = tmp_path / "bad.ini"
    ini.write_text("[m]\nmodel = x.gguf\nno-such-option = 1\n")
    r = subprocess.run([str(server_bin()), "--models-preset", str(ini)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and str(ini) in r.stderr and "no-such-option" in r.stderr, r.stderr
    ini.write_text("[m]\nctx-size = 512\n")
    r = subprocess.run([str(server_bin()), "--models-preset", str(ini)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "[m] names no model" in r.stderr, r.stderr


def test_a_childs_errors_and_the_api_prefix_pass_through(models_dir):
    s = router(models_dir, "--api-prefix", "/api", health_path="/api/health")
    try:
        r = requests.post(s.base + "/api/v1/chat/completions", timeout=60,
                          json={"model": "stories", "messages": [{"role": "user", "content": "Once " * 600}]})
        assert r.status_code == 400, r.text
        assert r.json()["error"]["type"] == "exceed_context_size_error", r.text  # the child's error object, whole
        r = requests.post(s.base + "/api/v1/chat/completions", timeout=60,
                          json={"model": "stories", "messages": [{"role": "user", "content": "Once"}],
                                "max_tokens": 4})
        assert r.status_code == 200, r.text
    finally:
        assert s.stop() == 0


def test_two_models_take_turns_under_models_max_1(models_dir):
    s = router(models_dir, "--models-max", "1")
    results = []

    def ask(model):
        for _ in range(2):
            r = chat(s, model)
            results.append((model, r.status_code, "" if r.status_code == 200 else r.text))

    try:
        threads = [threading.Thread(target=ask, args=(m,)) for m in ("stories", "sub")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [("stories", 200, "")] * 2 + [("sub", 200, "")] * 2, results
        assert sum(v["value"] == "loaded" for v in statuses(s).values()) == 1
    finally:
        assert s.stop() == 0
