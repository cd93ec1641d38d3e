"""How the slots hold the context. -c with the slots left automatic gives
every slot the cells asked for (its own region where they fit, as here);
-kvu shares one pool of -c cells in which any slot may grow to all of
them, as llama-server's kv_unified does: when the pool runs short the idle
slots' caches go first, then the request holding the most cells fails and
the others go on."""

import concurrent.futures

import pytest

from server_harness import ServerProcess


def tokens(n, salt):
    """n token ids of the test model's vocabulary, BOS first."""
    return [1] + [(7 * i + salt) % 200 + 10 for i in range(n - 1)]


def completion(server, prompt, n_predict, **extra):
    return server.post("/completion", {"prompt": prompt, "n_predict": n_predict, "temperature": 0,
                                       "ignore_eos": True, **extra})


def test_automatic_slots_each_get_the_context_asked_for():
    s = ServerProcess("-c", "256", "-t", "2")
    try:
        p = s.get("/props").json()
        assert (p["total_slots"], p["n_ctx_slot"], p["n_ctx"]) == (4, 256, 1024)
        assert p["default_generation_settings"]["n_ctx"] == 256
        line = [l for l in s.log_text().splitlines() if "context: 4 slots x 256 cells" in l]
        assert len(line) == 1 and "its own 256 cells" in line[0], s.log_text()
        # Far more than a quarter of -c, as llama-server's shared cells allow.
        r = completion(s, tokens(200, 1), 40)
        assert r.status_code == 200, r.text
        assert (r.json()["tokens_evaluated"], r.json()["tokens_predicted"]) == (200, 40)
    finally:
        assert s.stop() == 0


def test_a_shared_slot_may_use_every_cell():
    s = ServerProcess("-kvu", "-np", "2", "-c", "256", "-t", "2")
    try:
        p = s.get("/props").json()
        assert (p["n_ctx_slot"], p["n_ctx"]) == (256, 256)
        first = completion(s, tokens(200, 1), 40, id_slot=0)
        assert first.status_code == 200, first.text
        assert first.json()["tokens_predicted"] == 40
        # Slot 0, idle, holds 240 of the 256 cells: they make room for slot 1.
        second = completion(s, tokens(200, 2), 40, id_slot=1)
        assert second.status_code == 200, second.text
        assert second.json()["tokens_predicted"] == 40
        # Longer than the pool: refused before it starts, as llama-server's.
        too_long = completion(s, tokens(260, 3), 4)
        assert too_long.status_code == 400
        assert too_long.json()["error"]["type"] == "exceed_context_size_error"
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("tp", ["1", "2"])
def test_a_full_shared_pool_fails_the_largest_request_and_the_other_goes_on(tp):
    s = ServerProcess("-kvu", "-np", "2", "-c", "256", "-t", "2", "--tp", tp)
    try:
        # Each needs 100 + 150 cells: together more than the pool holds.
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            runs = [pool.submit(completion, s, tokens(100, salt), 150) for salt in (4, 5)]
            answers = [f.result() for f in runs]
        codes = sorted(a.status_code for a in answers)
        assert codes == [200, 500], [a.text for a in answers]
        done = next(a for a in answers if a.status_code == 200).json()
        assert done["tokens_predicted"] == 150
        failed = next(a for a in answers if a.status_code == 500).json()
        assert "context size exceeded" in failed["error"]["message"], failed
        assert "the shared KV cache is full" in s.log_text()
        # The pool is whole again for the next request.
        again = completion(s, tokens(100, 6), 150)
        assert again.status_code == 200, again.text
    finally:
        assert s.stop() == 0
