"""llama-server command lines start llama-tp-server unchanged: every flag is
honoured or warned about (one line each, naming it), the environment's
LLAMA_ARG_* variables count, the command line beats them, and typos get the
nearest real flag."""

import os
import re
import shlex
import subprocess

import pytest

from server_harness import REPO, ServerProcess, free_port, model_path, require_binary_and_model, server_bin

# Command lines as llama-server's documentation, Docker examples, model cards
# and launch scripts write them; MODEL is the test model. --host/--port values
# are replaced by a free loopback port.
COMMAND_LINES = [
    "-m MODEL",
    "--model MODEL",
    "-m MODEL -c 2048",
    "-m MODEL --port 8080 -c 1024",
    "-m MODEL --host 0.0.0.0 --port 8080",
    "-m MODEL -c 512 --host 0.0.0.0 --port 8080 --n-gpu-layers 99",
    # A GPU box's command line: buffer types this machine lacks are taken unchecked.
    "-m MODEL -ngl 99 -ot exps=CPU -sm row -mg 0",
    "--jinja -fa on -m MODEL",
    "-m MODEL -ngl 99 -fa on -c 4096 --jinja",
    "-m MODEL --ctx-size 8192 -n 1024 -np 2",
    "-m MODEL -np 4 -cb",
    "-m MODEL --parallel 8 --cont-batching --ctx-size 16384",
    "-m MODEL --metrics",
    "-m MODEL --slots --metrics --props",
    "-m MODEL --no-slots",
    "-m MODEL -t 2 -tb 2",
    "-m MODEL --threads 2 --threads-batch 2 --threads-http 4",
    "-m MODEL -b 2048 -ub 512",
    "-m MODEL --batch-size 512 --ubatch-size 512",
    "-m MODEL -ctk bf16 -ctv bf16",  # the bundled model's 8-wide heads hold no q8_0 blocks (test_server_kv_types)
    "-m MODEL --cache-type-k f16 --cache-type-v f16",
    "-m MODEL --no-mmap --mlock",
    "-m MODEL --temp 0.7 --top-k 20 --top-p 0.8 --min-p 0",
    "-m MODEL --temp 0.6 --top-p 0.95 --repeat-penalty 1.1 --repeat-last-n 128",
    "-m MODEL --seed 42 --temp 0",
    "-m MODEL --presence-penalty 1.5 --frequency-penalty 0.2",
    "-m MODEL --alias my-model",
    "-m MODEL -a gpt-3.5-turbo",
    "-m MODEL --chat-template chatml",
    "-m MODEL --jinja --reasoning-format deepseek",
    "-m MODEL --jinja --reasoning-format none --reasoning-budget 0",
    "-m MODEL --no-webui",
    "-m MODEL --timeout 300",
    "-m MODEL -to 600 --log-disable",
    "-m MODEL --verbose",
    "-m MODEL -lv 3",
    "-m MODEL --cache-reuse 256",
    "-m MODEL --context-shift --keep -1",
    "-m MODEL --no-warmup",
    "-m MODEL --offline",
    "-m MODEL --rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32768",
    "-m MODEL --override-kv tokenizer.ggml.add_bos_token=bool:false",
    "-m MODEL --check-tensors -r 'User:' -r '\\n\\n'",
    "-m MODEL --control-vector-layer-range 1 4 --no-escape",
    "-m MODEL --cors-origins http://localhost:3000",
    "-m MODEL --embeddings --pooling mean",
    "-m MODEL -sm layer -ts 3,1 -mg 0",
    "-m MODEL --split-mode row --main-gpu 1",
    "-m MODEL --numa distribute",
    "-m MODEL --prio 2 --poll 50",
    "-m MODEL --slot-save-path /tmp",
    "-m MODEL --props --metrics --slots -np 2 -c 4096 --host 0.0.0.0 --port 8080 -ngl 999 -fa auto",
    "-m MODEL --cache-ram 0 --ctx-checkpoints 0",
    "-m MODEL --kv-unified -np 2",
    "-m MODEL -dev none --no-op-offload",
    "-m MODEL --spec-default",
    "-m MODEL --spec-type ngram-simple --spec-draft-n-max 64",
]


def support_table():
    """flag word -> honoured? from --flag-support (the table the README shows)."""
    require_binary_and_model()
    out = subprocess.run([str(server_bin()), "--flag-support"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    table = {}
    for line in out.stdout.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        names = re.findall(r"`([^`]+)`", cells[0])
        assert names, line
        honoured = not cells[2].startswith("no effect")
        for n in names:
            table[n] = (honoured, names[0])
    return table


SUPPORT = None


def support():
    global SUPPORT
    if SUPPORT is None:
        SUPPORT = support_table()
    return SUPPORT


def rewrite(line, port):
    words = shlex.split(line)
    out = []
    i = 0
    saw_port = False
    while i < len(words):
        w = words[i]
        if w == "MODEL":
            out.append(str(model_path()))
        elif w == "--host":
            out += ["--host", "127.0.0.1"]
            i += 1
        elif w == "--port":
            out += ["--port", str(port)]
            saw_port = True
            i += 1
        else:
            out.append(w)
        i += 1
    if not saw_port:
        out += ["--host", "127.0.0.1", "--port", str(port)]
    return out


def no_effect_flags(words):
    """The words of a command line that name options without effect here."""
    table = support()
    return [w for w in words if w in table and not table[w][0]]


@pytest.mark.parametrize("line", COMMAND_LINES)
def test_llama_server_command_line_starts_and_serves(line):
    port = free_port()
    words = rewrite(line, port)
    s = ServerProcess(leading_args=words, port=port)
    try:
        if "--embeddings" in words:  # an embedding server answers embeddings only
            r = s.post("/v1/embeddings", {"input": "Once upon"})
            assert r.status_code == 200, r.text
            assert len(r.json()["data"][0]["embedding"]) == 64
        else:
            r = s.post("/v1/completions", {"prompt": "Once upon", "max_tokens": 3, "temperature": 0})
            assert r.status_code == 200, r.text
            assert r.json()["usage"]["completion_tokens"] >= 1
        log = s.log_text()
        assert "unknown argument" not in log
        warnings = [l for l in log.splitlines() if "has no effect in llama-tp-server" in l]
        expected = no_effect_flags(words)
        if "-ts" in words and "--tp" not in words:
            expected.append("-ts")
        for w in expected:
            assert sum(1 for l in warnings if re.search(r"\s" + re.escape(w) + r" has no effect", l)) == 1, \
                (w, warnings)
        assert len(warnings) == len(expected), (expected, warnings)
    finally:
        assert s.stop() == 0


def test_honoured_values_take_effect():
    s = ServerProcess("-c", "2048", "-np", "2", "-a", "alias-one", "-n", "5", "--temp", "0")
    try:
        p = s.get("/props").json()
        assert p["n_ctx"] == 2048 and p["total_slots"] == 2 and p["n_ctx_slot"] == 1024
        assert p["default_generation_settings"]["params"]["temperature"] == 0
        assert p["default_generation_settings"]["params"]["n_predict"] == 5
        assert s.get("/v1/models").json()["data"][0]["id"] == "alias-one"
        r = s.post("/v1/completions", {"prompt": "Once", "ignore_eos": True})
        assert r.json()["usage"]["completion_tokens"] == 5
    finally:
        assert s.stop() == 0


def test_slot_context_cap():
    # Without -c the cache is sized to the slots' cap, as llama-server does.
    s = ServerProcess("-np", "2", "--kv-unified-per-slot", "300")
    try:
        p = s.get("/props").json()
        assert p["n_ctx"] == 600 and p["n_ctx_slot"] == 300, p
    finally:
        assert s.stop() == 0
    # With -c each slot's share is capped; a prompt past the cap is refused.
    s = ServerProcess("-c", "2048", "-np", "2", "--kv-unified-per-slot", "64")
    try:
        p = s.get("/props").json()
        assert p["n_ctx"] == 2048 and p["n_ctx_slot"] == 64, p
        r = s.post("/v1/completions", {"prompt": "Once upon a time " * 20, "max_tokens": 2})
        assert r.status_code == 400 and "context" in r.text, r.text
        assert "capped at 64 of its 1024 cells" in s.log_text()
    finally:
        assert s.stop() == 0
    # A cap above the share cannot bind, and says so.
    s = ServerProcess("-c", "512", "-np", "2", "--kv-unified-per-slot", "4096")
    try:
        assert s.get("/props").json()["n_ctx_slot"] == 256
        assert "--kv-unified-per-slot 4096 exceeds a slot's 256 cells" in s.log_text()
    finally:
        assert s.stop() == 0


def test_rope_overrides_reach_the_engine():
    s = ServerProcess("--rope-scaling", "yarn", "--rope-scale", "4", "--yarn-orig-ctx", "128",
                      "--rope-freq-base", "20000")
    try:
        r = s.post("/v1/completions", {"prompt": "Once upon", "max_tokens": 3, "temperature": 0})
        assert r.status_code == 200, r.text
        log = s.log_text()
        assert "RoPE as asked: freq base 20000, freq scale 0.25, YaRN ext factor 1, attn factor 1" in log, log
        assert "original context 128" in log
        assert "has no effect" not in log
    finally:
        assert s.stop() == 0


def test_defaults_four_slots_and_a_fitted_context():
    s = ServerProcess()
    try:
        p = s.get("/props").json()
        assert p["total_slots"] == 4
        # The test model's training context, for every slot.
        assert p["n_ctx_slot"] == p["default_generation_settings"]["n_ctx"]
        log = s.log_text()
        line = [l for l in log.splitlines() if "context: 4 slots x" in l]
        assert len(line) == 1, log
        assert f"= {p['n_ctx']} " in line[0]
    finally:
        assert s.stop() == 0


def test_environment_counts_and_the_command_line_wins():
    env = {"LLAMA_ARG_CTX_SIZE": "1024", "LLAMA_ARG_N_PARALLEL": "2", "LLAMA_ARG_ALIAS": "from-env",
           "LLAMA_ARG_SPLIT_MODE": "row", "LLAMA_ARG_TP": "1"}
    s = ServerProcess("-a", "from-flag", env=env)
    try:
        p = s.get("/props").json()
        assert p["n_ctx"] == 1024 and p["total_slots"] == 2
        assert s.get("/v1/models").json()["data"][0]["id"] == "from-flag"
        # A variable of an option without effect is warned about by its name.
        assert "LLAMA_ARG_SPLIT_MODE has no effect in llama-tp-server" in s.log_text()
    finally:
        assert s.stop() == 0


def test_model_from_the_environment():
    port = free_port()
    s = ServerProcess(leading_args=["--host", "127.0.0.1", "--port", str(port)], port=port,
                      env={"LLAMA_ARG_MODEL": str(model_path()), "LLAMA_ARG_CTX_SIZE": "512"})
    try:
        # Every one of the automatic slots may use the 512 cells asked for.
        assert s.get("/props").json()["n_ctx_slot"] == 512
    finally:
        assert s.stop() == 0


def run(*args, env=None):
    require_binary_and_model()
    return subprocess.run([str(server_bin()), *args], capture_output=True, text=True, timeout=30,
                          env=None if env is None else {**os.environ, **env})


def test_typo_suggests_the_nearest_flag():
    for typo, near in (("--ctx-sise", "--ctx-size"), ("--paralel", "--parallel"), ("--n-gpu-layer", "--n-gpu-layers"),
                       ("--split-invarant", "--split-invariant")):
        r = run("-m", str(model_path()), typo, "1")
        assert r.returncode == 2, r.stderr
        assert f"unknown argument: {typo}" in r.stderr and f"did you mean {near}?" in r.stderr, r.stderr


def test_bad_values_name_the_flag_or_variable():
    cases = [(["-c", "abc"], None, "-c: expected an integer"),
             (["--chat-template-file", "/nonexistent/t.jinja"], None, "--chat-template-file"),
             (["-np", "-7"], None, "--parallel: -7 is out of range"),
             # Flags without effect here still refuse what llama-server refuses.
             (["-ngl", "abc"], None, "-ngl: invalid value 'abc'"),
             (["-sm", "bogus"], None, "-sm: invalid value 'bogus'"),
             (["-fa", "maybe"], None, "-fa: invalid value 'maybe': unknown value for --flash-attn"),
             ([], {"LLAMA_ARG_N_GPU_LAYERS": "lots"}, "LLAMA_ARG_N_GPU_LAYERS"),
             ([], {"LLAMA_ARG_CTX_SIZE": "lots"}, "LLAMA_ARG_CTX_SIZE"),
             ([], {"LLAMA_ARG_KV_UNIFIED": "perhaps"}, "LLAMA_ARG_KV_UNIFIED")]
    for args, env, needle in cases:
        r = run("-m", str(model_path()), *args, env=env)
        assert r.returncode == 2, (args, env, r.stderr)
        assert needle in r.stderr, (needle, r.stderr)


def test_devices_this_build_lacks_are_refused_with_the_ones_it_has():
    r = run("-m", str(model_path()), "-dev", "CUDA0")
    assert r.returncode == 1, r.stderr
    assert "no device 'CUDA0' in this build (devices: CPU" in r.stderr, r.stderr
    r = run("-m", str(model_path()), "--tp", "2", "-dev", "CPU,CPU,CPU")
    assert r.returncode == 1 and "-dev names 3 devices for 2 ranks" in r.stderr, r.stderr
    r = run("-m", str(model_path()), "-dev", "CPU,,CPU")
    assert r.returncode == 2 and "-dev: an empty device name" in r.stderr, r.stderr
    r = run("--list-devices")
    assert r.returncode == 0, r.stderr


def test_a_download_that_cannot_reach_its_hub_names_the_repository(tmp_path):
    # A closed port on loopback as the hub: nothing leaves the machine.
    env = {"MODEL_ENDPOINT": f"http://127.0.0.1:{free_port()}/", "LLAMA_CACHE": str(tmp_path)}
    r = run("-hf", "ggml-org/gemma-3-4b-it-GGUF", env=env)
    assert r.returncode == 1
    assert "-hf ggml-org/gemma-3-4b-it-GGUF: no GGUF model found" in r.stderr, r.stderr


def test_flag_support_covers_every_llama_server_flag():
    table = support()
    # The pinned llama-server takes about 250 options; every alias is listed.
    assert len(set(v[1] for v in table.values())) >= 200
    for w in ("-ngl", "--n-gpu-layers", "-fa", "--no-kv-unified", "--tp", "--split-invariant", "--no-slots"):
        assert w in table, w
    assert table["-c"][0] and table["--tp"][0] and table["-ngl"][0] and not table["-sm"][0]


def test_help_lists_both_sections():
    r = run("--help")
    assert r.returncode == 0
    assert "----- llama-tp -----" in r.stdout and "llama-server flags honoured here" in r.stdout
    assert "--ctx-size" in r.stdout and "LLAMA_ARG_CTX_SIZE" in r.stdout


def test_readme_flag_table_matches_the_binary():
    readme = (REPO / "server" / "README.md").read_text()
    out = run("--flag-support").stdout.strip()
    assert out in readme, "server/README.md differs from `llama-tp-server --flag-support`: run tools/flag-table.sh"


def test_log_flags(tmp_path):
    log = tmp_path / "server.log"
    s = ServerProcess("-np", "1", "-t", "1", "--log-file", str(log), "--log-disable")
    try:
        assert s.post("/v1/completions", {"prompt": "Once", "max_tokens": 2}).status_code == 200
    finally:
        assert s.stop() == 0
    assert "ready:" in log.read_text()
    assert "ready:" not in s.log_text()  # nothing on stderr
    s = ServerProcess("-np", "1", "-t", "1", "--no-log-timestamps")
    try:
        ready = [l for l in s.log_text().splitlines() if "ready:" in l]
        assert ready and ready[0].startswith("I llama-tp-server ready:"), ready
    finally:
        assert s.stop() == 0
    s = ServerProcess("-np", "1", "-t", "1", "--no-log-timestamps", "--no-log-prefix")
    try:
        assert any(l.startswith("llama-tp-server ready:") for l in s.log_text().splitlines())
    finally:
        assert s.stop() == 0
    r = run("-m", str(model_path()), "--log-file", str(tmp_path / "no" / "such" / "dir.log"))
    assert r.returncode == 2 and "--log-file" in r.stderr
