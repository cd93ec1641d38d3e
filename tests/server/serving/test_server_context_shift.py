"""--context-shift and --keep: a slot whose context fills while generating
drops half of what follows its first n_keep tokens and goes on, as
llama-server does; without it generation stops at the end of the context."""

import pytest

from server_harness import ServerProcess

BODY = {"prompt": "Once upon a time", "max_tokens": 300, "temperature": 0, "ignore_eos": True}


def complete(server, **extra):
    r = server.post("/v1/completions", {**BODY, **extra})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("tp", ["1", "2"])
def test_generation_goes_past_the_context(tp):
    s = ServerProcess("--tp", tp, "-np", "1", "-c", "128", "-t", "2", "--context-shift", "--keep", "2")
    try:
        body = complete(s)
        assert body["usage"]["completion_tokens"] == 300
        assert body["choices"][0]["finish_reason"] == "length"
        shifts = [l for l in s.log_text().splitlines() if "context shift" in l]
        assert len(shifts) >= 2, s.log_text()
        assert "n_keep = 3" in shifts[0], shifts[0]  # --keep 2, and BOS
        # The request's n_keep wins; -1 keeps the whole prompt.
        complete(s, n_keep=-1, max_tokens=200)
        n_prompt = body["usage"]["prompt_tokens"]
        assert f"n_keep = {n_prompt + 1}" in [l for l in s.log_text().splitlines() if "context shift" in l][-1]
    finally:
        assert s.stop() == 0


def test_without_it_generation_stops_at_the_context():
    s = ServerProcess("-np", "1", "-c", "128", "-t", "2")
    try:
        body = complete(s)
        assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] == 128
        assert body["choices"][0]["finish_reason"] == "length"
        assert "context shift" not in s.log_text()
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("shift", [True, False])
def test_native_truncated_says_the_context_ran_out(shift):
    s = ServerProcess("-np", "1", "-c", "128", "-t", "2", *(["--context-shift"] if shift else []))
    try:
        native = {"prompt": "Once upon a time", "temperature": 0, "ignore_eos": True}
        short = s.post("/completion", {**native, "n_predict": 8}).json()
        assert short["truncated"] is False and short["stop_type"] == "limit"
        # Past the context: shifted, or stopped where the context ends.
        long = s.post("/completion", {**native, "n_predict": 200}).json()
        assert long["truncated"] is True, long
        assert long["tokens_predicted"] == (200 if shift else 128 - long["tokens_evaluated"])
    finally:
        assert s.stop() == 0
