"""Every architecture beyond llama served over HTTP, split across two ranks
(a generated model of each), and gpt-oss's harmony chat template rendered
by the server's template engine."""

import pytest

from server_harness import ServerProcess, generated_model, server_bin

# make-model arguments of each; Mixtral is llama with experts.
ARCHS = {
    "mixtral": ("llama", ["--n-expert", "4"]),
    "phi3": ("phi3", []),
    "gemma2": ("gemma2", ["--n-swa", "8"]),
    "gemma3": ("gemma3", ["--n-swa", "8", "--swa-pattern", "2"]),
    "gpt-oss": ("gpt-oss", ["--n-swa", "8", "--n-expert", "4", "--n-expert-used", "2"]),
    "qwen35": ("qwen35", ["--n-layer", "4", "--ssm-n-group", "4", "--ssm-d-state", "64"]),
    "qwen35moe": ("qwen35moe", ["--n-layer", "4", "--ssm-n-group", "4", "--ssm-d-state", "64", "--n-expert", "4"]),
    "qwen3next": ("qwen3next", ["--n-layer", "4", "--ssm-n-group", "4", "--ssm-d-state", "64", "--n-expert", "4"]),
    "glm4moe": ("glm4moe", ["--n-layer", "3", "--n-expert", "4", "--n-ff-exp", "256", "--nextn-layers", "1"]),
    "deepseek2": ("deepseek2", ["--n-layer", "3", "--n-expert", "8", "--n-ff-exp", "256", "--nextn-layers", "1"]),
}


MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def rendered(server):
    """The chat template's prompt for MESSAGES."""
    r = server.post("/apply-template", {"messages": MESSAGES})
    assert r.status_code == 200, r.text
    return r.json()["prompt"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("archs")
    return {name: generated_model(d / f"{name}.gguf", arch=arch, extra=extra) for name, (arch, extra) in ARCHS.items()}


@pytest.mark.parametrize("name", sorted(ARCHS))
def test_served_across_two_ranks(models, name):
    s = ServerProcess("--tp", "2", "-np", "2", "-c", "1024", "-t", "2", model=models[name])
    try:
        body = {"prompt": "Once upon a time", "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        r = s.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 24
        # Past gemma2's, gemma3's and gpt-oss's 8-position windows, and the same text again.
        assert s.post("/v1/completions", body).json()["choices"][0]["text"] == r.json()["choices"][0]["text"]
        props = s.get("/props").json()
        assert props["model_path"].endswith(f"{name}.gguf")
    finally:
        assert s.stop() == 0


def test_gpt_oss_renders_harmony(models):
    s = ServerProcess("-np", "1", "-c", "1024", "-t", "2", model=models["gpt-oss"])
    try:
        prompt = rendered(s)
        assert "<|start|>user<|message|>Hi there<|end|>" in prompt, prompt
        assert prompt.endswith("<|start|>assistant"), prompt
        chat = s.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
    finally:
        assert s.stop() == 0


def test_sliding_window_cache_answers_as_the_full_one(models):
    """With -b 16 the sliding-window layers keep 512 cells of a 2048-cell
    context; a prompt of ~1000 tokens makes them move their cells down."""
    words = " ".join(f"w{i % 97} tale{i % 13}" for i in range(400))
    short = " ".join(words.split()[:40])
    answers = {}
    for mode in ("window", "--swa-full"):
        args = ["-np", "1", "-c", "2048", "-b", "16", "-t", "2"] + ([mode] if mode != "window" else [])
        s = ServerProcess(*args, model=models["gemma3"])
        try:
            body = {"prompt": words, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
            first = s.post("/v1/completions", body).json()
            again = s.post("/v1/completions", body).json()
            assert again["choices"][0]["text"] == first["choices"][0]["text"]
            assert again["timings"]["prompt_n"] == 1  # the whole prompt but its last token reused
            # A shorter prefix: the window layers no longer hold what it reads, so it is computed.
            part = s.post("/v1/completions", {**body, "prompt": short}).json()
            if mode == "window":
                assert "sliding-window layers keep 512 cells" in s.log_text()
                assert part["timings"]["prompt_n"] == part["usage"]["prompt_tokens"]
            answers[mode] = (first["choices"][0]["text"], part["choices"][0]["text"])
        finally:
            assert s.stop() == 0
    assert answers["window"] == answers["--swa-full"]


def test_gemma4_with_its_vocabulary_and_template(tmp_path):
    """Gemma 4's own tokenizer (262144 tokens) and chat template, served
    across two ranks that split the vocabulary."""
    share = server_bin().parents[1] / "share" / "llama-tp"
    model = generated_model(tmp_path / "gemma4.gguf", arch="gemma4", vocab="ggml-vocab-gemma-4.gguf",
                            extra=["--n-swa", "8", "--swa-pattern", "2", "--head-dim-global", "64",
                                   "--chat-template", str(share / "google-gemma-4-31B-it.jinja")])
    s = ServerProcess("--tp", "2", "-np", "1", "-c", "1024", "-t", "2", model=model)
    try:
        prompt = rendered(s)
        assert "<|turn>user\nHi there<turn|>" in prompt, prompt
        assert prompt.rstrip().endswith("<|turn>model"), prompt
        # The turn markers are single tokens of this vocabulary.
        tokens = s.post("/tokenize", {"content": "<|turn>user", "add_special": False, "parse_special": True})
        assert tokens.status_code == 200, tokens.text
        assert len(tokens.json()["tokens"]) == 2, tokens.json()
        chat = s.post("/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 8, "temperature": 0})
        assert chat.status_code == 200, chat.text
        assert chat.json()["choices"][0]["message"]["role"] == "assistant"
        prompt_tokens = s.post("/tokenize", {"content": prompt, "add_special": True, "parse_special": True}).json()
        assert chat.json()["usage"]["prompt_tokens"] == len(prompt_tokens["tokens"])
    finally:
        assert s.stop() == 0
