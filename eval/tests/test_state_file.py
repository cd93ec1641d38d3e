"""The state file stays valid JSON under many writers, and its format."""

import json
import threading

import pytest

from conftest import load_state, start_eval
from llama_eval.errors import UsageError
from llama_eval.state import StateStore, read_state, write_json_atomic


def read_while_running(path, process):
    """Parses the file as often as possible until the process exits; returns the number of reads."""
    reads = 0
    while process.poll() is None:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        json.loads(text)  # must never fail: writers replace the file atomically
        reads += 1
    return reads


@pytest.mark.parametrize("attempt", [1, 2])
def test_32_threads_always_leave_a_valid_state_file(simulator, tmp_path, attempt):
    sim = simulator("--latency-ms", "2", "--seed", str(attempt))
    out = tmp_path / "state.json"
    run = start_eval("--server", sim.url, "--threads", "32", "--dataset", "gsm8k,math500", "--n-cases", "60",
                     "--save-interval", "0", "--output", str(out))
    reads = read_while_running(out, run)
    _, stderr = run.communicate(timeout=60)
    assert run.returncode == 0, stderr
    assert reads > 10
    state = load_state(out)
    assert state["summary"]["n"] == 120 and state["summary"]["correct"] == sim.stats()["correct"]
    assert not list(tmp_path.glob(".state.json.*.tmp"))


def test_concurrent_updates_in_process_are_all_kept(tmp_path):
    path = tmp_path / "s.json"
    tasks = [{"id": f"t{i}", "case_id": f"c{i}", "dataset": "d", "status": "pending"} for i in range(160)]
    store = StateStore.create(path, {"datasets": []}, tasks, save_interval_s=0)
    store.save(force=True)
    stop = threading.Event()
    failures = []

    def reader():
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as err:
                failures.append(err)

    def writer(offset):
        for i in range(offset, 160, 8):
            store.update_task(f"t{i}", {"status": "done", "correct": i % 3 == 0, "server": "s"})

    reader_thread = threading.Thread(target=reader)
    reader_thread.start()
    writers = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for thread in writers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    reader_thread.join()
    store.save(force=True)
    assert not failures
    state = read_state(path)
    assert state["summary"]["n"] == 160 and state["summary"]["correct"] == len(range(0, 160, 3))


def test_atomic_write_keeps_old_file_when_serialisation_fails(tmp_path):
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"a": object()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("content,message", [
    ("{broken", "not valid JSON"),
    ('{"some": "json"}', "not a llama-eval state file"),
    ('{"format": "llama-eval-state", "version": 99, "tasks": {}}', "version 99"),
])
def test_read_state_rejects_bad_files(tmp_path, content, message):
    path = tmp_path / "s.json"
    path.write_text(content)
    with pytest.raises(UsageError, match=message):
        read_state(path)
