"""Slot save / restore / erase (--slot-save-path, POST /slots/{id}?action=...):
a slot saved at --tp 2 restores at --tp 1 and continues exactly as it would
have; files of another model, of another cache type, or damaged ones are
refused (another RoPE included) and leave the slot as it was."""

import pytest

from server_harness import ServerProcess, assert_error, generated_model

PROMPT = "The quick brown fox"
FLAGS = ("-np", "1", "-c", "512", "--split-invariant")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("slots") / "llama-q8_0.gguf")


def complete(server, prompt, n=8):
    r = server.post("/completion", {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    return r.json()


def action(server, what, filename=None, slot=0):
    body = {} if filename is None else {"filename": filename}
    return server.post(f"/slots/{slot}?action={what}", body)


def test_saved_at_tp2_restores_at_tp1_with_the_same_continuation(model, tmp_path):
    tp2 = ServerProcess(*FLAGS, "--tp", "2", "-t", "2", "--slot-save-path", str(tmp_path), model=model)
    try:
        first = complete(tp2, PROMPT)["content"]
        r = action(tp2, "save", "story.bin")
        assert r.status_code == 200, r.text
        saved = r.json()
        assert saved["id_slot"] == 0 and saved["filename"] == "story.bin"
        assert saved["n_saved"] > 0 and saved["n_written"] == (tmp_path / "story.bin").stat().st_size
        assert "save_ms" in saved["timings"]
        follow_up = PROMPT + first + " and"
        expected = complete(tp2, follow_up)
    finally:
        assert tp2.stop() == 0
    assert expected["tokens_cached"] > 0

    tp1 = ServerProcess(*FLAGS, "-t", "1", "--slot-save-path", str(tmp_path), model=model)
    try:
        cold = complete(tp1, follow_up)
        assert cold["content"] == expected["content"]  # split-invariant: one rank answers as two
        r = action(tp1, "restore", "story.bin")
        assert r.status_code == 200, r.text
        assert r.json()["n_restored"] == saved["n_saved"] and r.json()["n_read"] > 0
        warm = complete(tp1, follow_up)
        # The restored cells served the prefix, and the continuation is the same.
        assert warm["tokens_cached"] == expected["tokens_cached"]
        assert warm["content"] == expected["content"]
        # Erase drops them.
        r = action(tp1, "erase")
        assert r.status_code == 200 and r.json()["n_erased"] > 0
        assert complete(tp1, "Once upon")["tokens_cached"] == 0
    finally:
        assert tp1.stop() == 0


def test_refusals_leave_the_slot_as_it_was(model, tmp_path):
    other = generated_model(tmp_path / "other.gguf", seed=8)
    s_other = ServerProcess(*FLAGS, "-t", "1", "--slot-save-path", str(tmp_path), model=other)
    try:
        complete(s_other, PROMPT)
        assert action(s_other, "save", "other.bin").status_code == 200
    finally:
        assert s_other.stop() == 0

    s = ServerProcess(*FLAGS, "-t", "1", "--slot-save-path", str(tmp_path), model=model)
    try:
        complete(s, PROMPT)
        assert action(s, "save", "mine.bin").status_code == 200
        good = (tmp_path / "mine.bin").read_bytes()
        corrupt = bytearray(good)
        corrupt[len(corrupt) // 2] ^= 0x55
        (tmp_path / "corrupt.bin").write_bytes(bytes(corrupt))
        (tmp_path / "short.bin").write_bytes(good[:len(good) // 3])
        (tmp_path / "junk.bin").write_bytes(b"not a slot at all")

        for name, status, words in (("other.bin", 400, "another model"), ("corrupt.bin", 400, "checksum"),
                                    ("short.bin", 400, "truncated"), ("junk.bin", 400, "not a slot file"),
                                    ("missing.bin", 404, "no slot file")):
            r = action(s, "restore", name)
            assert_error(r, status)
            assert words in r.json()["error"]["message"], (name, r.json())
        for bad in ("../mine.bin", "", ".hidden", "a/b"):
            assert_error(action(s, "restore", bad), 400, param="filename")
        assert_error(action(s, "explode", "mine.bin"), 400, param="action")
        assert_error(action(s, "save", "x.bin", slot=7), 400)
        assert_error(s.post("/slots/abc?action=erase", {}), 400, param="id_slot")
        # The slot still holds its cells: the same prompt is served from them.
        assert complete(s, PROMPT)["tokens_cached"] > 0
    finally:
        assert s.stop() == 0

    q = ServerProcess(*FLAGS, "-t", "1", "-ctk", "q8_0", "--slot-save-path", str(tmp_path), model=model)
    try:
        r = action(q, "restore", "mine.bin")
        assert_error(r, 400)
        assert "f16 / f16 cache; this server stores q8_0 / f16" in r.json()["error"]["message"], r.json()
    finally:
        assert q.stop() == 0

    # Keys rotated under another RoPE base would attend wrongly: refused, naming both.
    rope = ServerProcess(*FLAGS, "-t", "1", "--rope-freq-base", "20000", "--slot-save-path", str(tmp_path),
                         model=model)
    try:
        r = action(rope, "restore", "mine.bin")
        assert_error(r, 400)
        message = r.json()["error"]["message"]
        assert "was saved with rope base 10000" in message and "this server has rope base 20000" in message, message
        assert complete(rope, PROMPT)["tokens_cached"] == 0
    finally:
        assert rope.stop() == 0


def test_slot_actions_need_a_save_path(model):
    s = ServerProcess(*FLAGS, "-t", "1", model=model)
    try:
        r = action(s, "save", "x.bin")
        assert_error(r, 501)
        assert "--slot-save-path" in r.json()["error"]["message"]
    finally:
        assert s.stop() == 0


def test_save_path_must_be_a_directory(tmp_path):
    import subprocess
    from server_harness import model_path, server_bin
    r = subprocess.run([str(server_bin()), "-m", str(model_path()), "--slot-save-path", str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "not a directory" in r.stderr, r.stderr


def test_windows_restore_into_windows_and_every_cell_into_both(tmp_path):
    """Sliding-window layers keeping their window (-b 16: 512 of 2048 cells)
    save only the window; a server keeping every cell refuses that file and
    keeps its slot, while its own file restores into the windowed server."""
    model = generated_model(tmp_path / "gemma3.gguf", arch="gemma3", extra=["--n-swa", "8", "--swa-pattern", "2"])
    words = " ".join(f"w{i % 97} tale{i % 13}" for i in range(300))
    common = ("-np", "1", "-c", "2048", "-b", "16", "-t", "2", "--split-invariant", "--slot-save-path", str(tmp_path))
    windowed = ServerProcess(*common, model=model)
    full = ServerProcess(*common, "--swa-full", model=model)
    try:
        for s, name in ((windowed, "windows.bin"), (full, "every-cell.bin")):
            complete(s, words)
            assert action(s, "save", name).status_code == 200
        assert (tmp_path / "windows.bin").stat().st_size < (tmp_path / "every-cell.bin").stat().st_size
        r = action(full, "restore", "windows.bin")
        assert_error(r, 400)
        assert "--swa-full" in r.json()["error"]["message"], r.json()
        assert complete(full, words)["tokens_cached"] > 0  # its own cells are still there
        assert action(windowed, "erase").status_code == 200
        restored = action(windowed, "restore", "every-cell.bin")
        assert restored.status_code == 200, restored.text
        assert restored.json()["n_restored"] > len(words.split())
        # (The prompt alone is recomputed: the restored window is that of the
        # prompt and its answer, past where this prompt ends.)
        assert complete(windowed, words)["content"] == complete(full, words)["content"]
    finally:
        assert windowed.stop() == 0
        assert full.stop() == 0
