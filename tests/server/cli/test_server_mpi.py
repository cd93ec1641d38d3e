"""llama-tp-server under mpirun: two processes serve as one rank group
(process 0 answers HTTP, process 1 follows), give a single-process
server's greedy answers, and stop together when a process dies, stops
answering (busy or idle), or holds another model."""

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from model_hub import ModelHub
from mpi_server import MPIRUN, MpiServer, require_mpirun
from server_harness import ServerProcess, free_port, generated_model, server_bin

@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A generated q8_0 llama: quantized activations, the hardest case for equal answers."""
    return generated_model(tmp_path_factory.mktemp("mpi") / "llama-q8_0.gguf")


PROMPTS = ["Tell me a story about a dog.", "What is two plus two?", "Name three colours.", "Say hello.",
           "Count to five.", "Describe the sea.", "Why is the sky blue?", "Write a short poem."]


def chat(server, i, stream):
    body = {"messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": 24, "temperature": 0,
            "stream": stream}
    r = server.post("/v1/chat/completions", body, stream=stream)
    assert r.status_code == 200, r.text
    if not stream:
        return r.json()["choices"][0]["message"]["content"]
    text = ""
    # Bytes: decoded lines would also split at U+2028 and the like inside the JSON.
    for raw in r.iter_lines():
        line = raw.decode()
        if line.startswith("data: ") and line != "data: [DONE]":
            for choice in json.loads(line[6:])["choices"]:
                text += choice["delta"].get("content") or ""
    return text


def concurrent_answers(server, stream):
    out = [None] * len(PROMPTS)

    def one(i):
        out[i] = chat(server, i, stream)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert all(isinstance(a, str) for a in out), out
    return out


def test_two_processes_answer_as_one_process_does(model):
    args = ("-np", "8", "-c", "4096", "--split-invariant", "--metrics")
    single = ServerProcess(*args, "--tp", "2", "-t", "2", model=model)
    try:
        expected = concurrent_answers(single, stream=False)
        expected_stream = concurrent_answers(single, stream=True)
    finally:
        assert single.stop() == 0
    group = MpiServer(*args, "-t", "1", model=model)
    try:
        assert "tp 2 (allreduce mpi" in group.log_text()
        got = concurrent_answers(group, stream=False)
        got_stream = concurrent_answers(group, stream=True)
        metrics = group.get("/metrics").text
    finally:
        assert group.stop() == 0, group.log_text()
    assert got == expected
    assert got_stream == expected_stream
    assert any(len(a) > 0 for a in got)
    # Process 0 reports every rank's collectives, the follower's included.
    assert 'llamatp_collective_calls_total{rank="1"}' in metrics


def long_generation(server, got):
    try:
        r = requests.post(server.base + "/v1/completions", json={
            "prompt": "Once upon a time", "max_tokens": 100000, "ignore_eos": True, "stream": True},
            stream=True, timeout=30)
        got["status"] = r.status_code
        got["lines"] = [l for l in r.iter_lines(decode_unicode=True) if l]
    except requests.RequestException as e:
        got["error"] = repr(e)


def queued_request(server, got):
    try:
        r = requests.post(server.base + "/v1/completions", json={"prompt": "Once", "max_tokens": 4}, timeout=30)
        got["status"], got["text"] = r.status_code, r.text
    except requests.RequestException as e:
        got["error"] = repr(e)


def generation_failed(got):
    if "error" in got or got.get("status") != 200:
        return True
    return any('"error"' in l for l in got["lines"]) or got["lines"][-1:] != ["data: [DONE]"]


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stopped"])
def test_a_follower_fault_stops_the_group(model, fault):
    group = MpiServer("-np", "1", "-c", "131072", "-t", "1", model=model)
    got = {}
    client = threading.Thread(target=long_generation, args=(group, got))
    client.start()
    time.sleep(1.0)
    assert client.is_alive(), got
    # A second request waits for the one slot.
    queued = {}
    waiting = threading.Thread(target=queued_request, args=(group, queued))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and group.get("/slots").json()[0]["is_processing"], queued
    os.kill(group.ranks[1], fault)
    since = time.time()
    health = group.health_while_running(since)
    took = group.wait_group_gone(since)
    client.join(timeout=30)
    waiting.join(timeout=30)
    log = group.log_text()
    group.stop()
    assert generation_failed(got), got
    # The waiting request is answered with an error too, never left hanging.
    assert "error" in queued or queued.get("status") == 503, queued
    assert group.proc.returncode != 0, log
    print(f"fault {fault.name}: every process gone after {took:.1f} s")
    if fault == signal.SIGSTOP:
        # Process 0 names the rank that stopped answering, answers 503 and
        # reports the failure on /health before it exits.
        # (in the AllReduce or in the gather of the logits, wherever it stopped)
        assert "process 1 on" in log and "stopped answering" in log, log
        assert any('"error"' in l and "rank group failed" in l for l in got.get("lines", [])), got
        assert queued.get("status") == 503 and "rank group failed" in queued["text"], queued
        assert 503 in health, health


@pytest.mark.parametrize("process", [0, 1], ids=["process-0", "follower"])
def test_a_process_stopped_while_idle_stops_the_group(model, process):
    """No request runs: only the heartbeat between the processes can notice."""
    group = MpiServer("-np", "1", "-c", "512", "-t", "1", model=model)
    r = group.post("/v1/completions", {"prompt": "Once", "max_tokens": 2})
    assert r.status_code == 200, r.text
    time.sleep(2.0)  # idle for longer than a heartbeat
    assert group.get("/health").status_code == 200
    os.kill(group.ranks[process], signal.SIGSTOP)
    since = time.time()
    # Process 0 stopped answers nothing: only the follower's stop shows on /health.
    health = group.health_while_running(since) if process == 1 else []
    took = group.wait_group_gone(since)
    log = group.log_text()
    group.stop()
    assert group.proc.returncode != 0, log
    print(f"process {process} stopped while idle: every process gone after {took:.1f} s")
    if process == 1:
        # Process 0 names the follower and answers 503 on /health before it exits.
        assert "process 1 on" in log and "stopped answering" in log, log
        assert 503 in health, health
    else:
        # The follower names process 0.
        assert "process 0 on" in log and "stopped answering" in log, log


def test_each_process_may_read_the_model_at_its_own_path(model, tmp_path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(model, copy)
    group = MpiServer("-c", "256", "-t", "1", "--model-path-rank", f"0={model}", "--model-path-rank", f"1={copy}",
                      model=tmp_path / "nowhere.gguf")
    try:
        r = group.post("/v1/completions", {"prompt": "Once", "max_tokens": 4, "temperature": 0})
        assert r.status_code == 200, r.text
    finally:
        assert group.stop() == 0, group.log_text()


def test_processes_of_one_host_download_a_model_once(model, tmp_path):
    hub = ModelHub()
    hub.repos["example/llama-GGUF"] = {"llama-Q8_0.gguf": Path(model).read_bytes()}
    port = free_port()
    try:
        group = MpiServer("-c", "256", "-t", "1", port=port,
                          leading_args=["-hf", "example/llama-GGUF", "--host", "127.0.0.1", "--port", str(port)],
                          env={"MODEL_ENDPOINT": hub.endpoint, "LLAMA_CACHE": str(tmp_path)})
        try:
            r = group.post("/v1/completions", {"prompt": "Once", "max_tokens": 4, "temperature": 0})
            assert r.status_code == 200, r.text
        finally:
            assert group.stop() == 0, group.log_text()
    finally:
        hub.close()
    # Process 1 found the file process 0 fetched.
    assert len(hub.downloads) == 1, (hub.downloads, group.log_text())
    assert group.log_text().count("model: -hf example/llama-GGUF is ") == 2, group.log_text()


def test_lora_adapters_across_two_processes(model, tmp_path):
    adapter = tmp_path / "adapter.gguf"
    subprocess.run([str(server_bin().parent / "llama-tp-make-model"), "--lora-of", str(model), "-o", str(adapter)],
                   check=True, capture_output=True, timeout=120)
    args = ("-np", "2", "-c", "512", "-t", "1", "--lora-scaled", f"{adapter}:0.75")
    bodies = [{"prompt": "Once upon a time", "n_predict": 12, "temperature": 0, "ignore_eos": True, "lora": lora}
              for lora in ([{"id": 0, "scale": 0.75}], [{"id": 0, "scale": 0}], [{"id": 0, "scale": -0.5}])]

    def answers(server):
        try:
            out = []
            for b in bodies:
                r = server.post("/completion", b)
                assert r.status_code == 200, r.text
                out.append(r.json()["content"])
            return out
        finally:
            assert server.stop() == 0, server.log_text()

    expected = answers(ServerProcess(*args, model=model))
    assert len(set(expected)) == 3, expected
    assert answers(MpiServer(*args, model=model)) == expected


def test_a_process_with_another_model_is_refused(model, tmp_path):
    other = tmp_path / "other.gguf"
    generated_model(other, seed=8)
    require_mpirun()
    server = [str(server_bin()), "--port", "0", "-c", "256", "-t", "1"]
    r = subprocess.run([*MPIRUN, "-n", "1", *server, "-m", str(model), ":", "-n", "1", *server, "-m", str(other)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "process 1 on" in r.stderr and "does not match process 0" in r.stderr, r.stderr
    assert "model:" in r.stderr and "header digest" in r.stderr, r.stderr


def test_a_process_with_one_changed_byte_of_weights_is_refused(model, tmp_path):
    """Same metadata, same size: only the digest of the tensor data tells them apart."""
    changed = tmp_path / "changed.gguf"
    data = bytearray(model.read_bytes())
    data[len(data) - 1000] ^= 0x01
    changed.write_bytes(bytes(data))
    require_mpirun()
    server = [str(server_bin()), "--port", "0", "-c", "256", "-t", "1"]
    r = subprocess.run([*MPIRUN, "-n", "1", *server, "-m", str(model), ":", "-n", "1", *server, "-m", str(changed)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    refusal = [l for l in r.stderr.splitlines() if "refusing to start" in l]
    assert refusal, r.stderr
    # The process, its host and its file, and what differs.
    assert "process 1 on" in refusal[0] and f"(model file '{changed}')" in refusal[0], refusal[0]
    assert "process 0 on" in refusal[0] and f"(model file '{model}')" in refusal[0], refusal[0]
    assert "tensor data is" in refusal[0], refusal[0]
    assert "tensor data digest" in r.stderr  # the time it took is logged


def test_slots_move_between_one_process_and_two(model, tmp_path):
    args = ("-np", "1", "-c", "512", "--split-invariant", "--slot-save-path", str(tmp_path))
    body = {"prompt": "Once upon a time", "n_predict": 8, "temperature": 0, "ignore_eos": True}
    single = ServerProcess(*args, "--tp", "2", "-t", "2", model=model)
    try:
        first = single.post("/completion", body).json()["content"]
        assert single.post("/slots/0?action=save", {"filename": "s.bin"}).status_code == 200
        follow = dict(body, prompt=body["prompt"] + first)
        expected = single.post("/completion", follow).json()
    finally:
        assert single.stop() == 0
    group = MpiServer(*args, "-t", "1", model=model)
    try:
        r = group.post("/slots/0?action=restore", {"filename": "s.bin"})
        assert r.status_code == 200, r.text
        # Saved back from the group (every process's heads joined on process
        # 0): the same bytes.
        r = group.post("/slots/0?action=save", {"filename": "t.bin"})
        assert r.status_code == 200, r.text
        got = group.post("/completion", follow).json()
        assert got["content"] == expected["content"]
        assert got["tokens_cached"] == expected["tokens_cached"] > 0
        # A slot the group itself decoded, saved and restored into one process.
        group.post("/completion", dict(body, id_slot=0))
        assert group.post("/slots/0?action=save", {"filename": "u.bin"}).status_code == 200
        continued = group.post("/completion", dict(follow, prompt=body["prompt"] + first)).json()
    finally:
        assert group.stop() == 0, group.log_text()
    assert (tmp_path / "t.bin").read_bytes() == (tmp_path / "s.bin").read_bytes()
    single = ServerProcess(*args, "-t", "2", model=model)
    try:
        assert single.post("/slots/0?action=restore", {"filename": "u.bin"}).status_code == 200
        again = single.post("/completion", dict(follow, prompt=body["prompt"] + first)).json()
        assert again["content"] == continued["content"]
        assert again["tokens_cached"] == continued["tokens_cached"] > 0
    finally:
        assert single.stop() == 0


def served(server, ask):
    """ask(server), then the server stops cleanly."""
    try:
        return ask(server)
    finally:
        assert server.stop() == 0, server.log_text()


def test_embeddings_across_two_processes(model):
    args = ("-np", "1", "-c", "512", "--embeddings", "--split-invariant")
    body = {"content": "Once upon a time", "embd_normalize": -1}

    def embedding(server):
        r = server.post("/embedding", body)
        assert r.status_code == 200, r.text
        return r.json()[0]["embedding"][0]

    expected = served(ServerProcess(*args, "--tp", "2", "-t", "2", model=model), embedding)
    got = served(MpiServer(*args, "-t", "1", model=model), embedding)
    assert len(got) == len(expected) == 256
    assert got == expected  # split-invariant sums: the same numbers however the ranks are placed


def test_context_shift_across_two_processes(model):
    """Every process rotates its own keys: the text past several shifts is
    the one two thread ranks write (split-invariant sums, the same bits)."""
    args = ("-np", "1", "-c", "128", "--context-shift", "--split-invariant")
    body = {"prompt": "Once upon a time", "max_tokens": 200, "temperature": 0, "ignore_eos": True}

    def text(server):
        r = server.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 200
        assert server.log_text().count("context shift") >= 2
        return r.json()["choices"][0]["text"]

    expected = served(ServerProcess(*args, "--tp", "2", "-t", "2", model=model), text)
    assert served(MpiServer(*args, "-t", "1", model=model), text) == expected


def answer_and_save_as_one_process_and_two(model, tmp_path, args, body, log_line=None):
    """Two ranks of one process, then two processes of one rank, answer
    body and save slot 0: both must give the same text and the same bytes."""
    answers = []
    for server in (lambda: ServerProcess(*args, "--tp", "2", "-t", "2", model=model),
                   lambda: MpiServer(*args, "-t", "1", model=model)):
        s = server()
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            if log_line:
                assert log_line in s.log_text()
            saved = s.post("/slots/0?action=save", {"filename": f"slot{len(answers)}.bin"})
            assert saved.status_code == 200, saved.text
            answers.append(r.json()["choices"][0]["text"])
        finally:
            assert s.stop() == 0
    assert answers[0] == answers[1]
    assert (tmp_path / "slot0.bin").read_bytes() == (tmp_path / "slot1.bin").read_bytes()


def test_sliding_window_cache_across_processes(tmp_path):
    """A dense q8_0 Gemma 3 whose sliding-window layers keep 512 cells of
    2048 (-b 16): two processes, the window moved down several times by a
    long prompt, answer and save a slot as two ranks of one process do."""
    model = generated_model(tmp_path / "gemma3.gguf", arch="gemma3", extra=["--n-swa", "8", "--swa-pattern", "2"])
    words = " ".join(f"w{i % 97} tale{i % 13}" for i in range(400))
    args = ("-np", "1", "-c", "2048", "-b", "16", "--split-invariant", "--slot-save-path", str(tmp_path))
    body = {"prompt": words, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    answer_and_save_as_one_process_and_two(model, tmp_path, args, body, "sliding-window layers keep 512 cells")


def test_linear_attention_states_across_processes(tmp_path):
    """A qwen35 whose linear-attention states are split by key heads: two
    processes answer and save a slot (every process's share of the states
    joined on process 0) as two ranks of one process do."""
    # 8 key heads beside 4 KV heads: each process's share of one is not the other's.
    model = generated_model(tmp_path / "qwen35.gguf", arch="qwen35",
                            extra=["--n-layer", "4", "--ssm-n-group", "8", "--ssm-d-state", "64"])
    args = ("-np", "1", "-c", "1024", "--split-invariant", "--slot-save-path", str(tmp_path))
    body = {"prompt": "Once upon a time there was a fox", "max_tokens": 8, "temperature": 0, "ignore_eos": True}
    answer_and_save_as_one_process_and_two(model, tmp_path, args, body)


def test_linear_attention_drafts_across_processes(tmp_path):
    """Drafts on a qwen35 split over two processes: every rank saves its
    share of the slot's state before a draft is checked and goes back to it
    on a rejection; the tokens are one process's without drafts."""
    extra = ["--n-layer", "4", "--ssm-n-group", "8", "--ssm-d-state", "64"]
    model = generated_model(tmp_path / "qwen35.gguf", arch="qwen35", extra=extra)
    draft = generated_model(tmp_path / "qwen35-q4_k.gguf", arch="qwen35", weight_type="q4_k", extra=extra)
    args = ("-np", "1", "-c", "1024", "--split-invariant")
    body = {"prompt": "Once upon a time there was a fox", "n_predict": 32, "temperature": 0, "ignore_eos": True,
            "return_tokens": True}
    one = ServerProcess(*args, "--tp", "2", "-t", "2", model=model)
    try:
        expected = one.post("/completion", body).json()
    finally:
        assert one.stop() == 0
    group = MpiServer(*args, "-t", "1", "-md", str(draft), model=model)
    try:
        got = group.post("/completion", body).json()
    finally:
        assert group.stop() == 0, group.log_text()
    assert got["tokens"] == expected["tokens"]
    assert 0 < got["timings"]["draft_n_accepted"] < got["timings"]["draft_n"], got["timings"]
