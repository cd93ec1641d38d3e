"""--embeddings: /v1/embeddings and /embedding with every pooling, the same
vectors from one rank and from two, and the routes each mode refuses."""

import base64
import math
import struct

import pytest

from server_harness import ServerProcess, assert_error

TEXTS = ["Once upon a time", "The dog ran to the park"]


def embed_server(*flags):
    return ServerProcess("-np", "2", "-c", "1024", "--embeddings", *flags)


def raw_rows(server, text):
    r = server.post("/embedding", {"content": text, "embd_normalize": -1})
    assert r.status_code == 200, r.text
    [item] = r.json()
    return item["embedding"]


@pytest.fixture(scope="module")
def mean_server():
    s = embed_server("-t", "1")
    yield s
    assert s.stop() == 0


def test_openai_embeddings(mean_server):
    r = mean_server.post("/v1/embeddings", {"input": TEXTS, "model": "text-embedding-3-small"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "text-embedding-3-small"
    assert [d["index"] for d in body["data"]] == [0, 1]
    for d in body["data"]:
        assert d["object"] == "embedding" and len(d["embedding"]) == 64
        assert abs(math.sqrt(sum(v * v for v in d["embedding"])) - 1.0) < 1e-4  # euclidean by default
    assert body["data"][0]["embedding"] != body["data"][1]["embedding"]
    n = sum(len(mean_server.post("/tokenize", {"content": t, "add_special": True}).json()["tokens"]) for t in TEXTS)
    assert body["usage"]["prompt_tokens"] == n
    one = mean_server.post("/v1/embeddings", {"input": TEXTS[1]}).json()["data"][0]["embedding"]
    assert max(abs(a - b) for a, b in zip(one, body["data"][1]["embedding"])) < 1e-5
    b64 = mean_server.post("/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"}).json()
    floats = struct.unpack("<64f", base64.b64decode(b64["data"][0]["embedding"]))
    assert max(abs(a - b) for a, b in zip(floats, body["data"][0]["embedding"])) < 1e-6


def test_poolings_agree_with_the_token_rows():
    rows = {}
    for pooling in ("none", "mean", "cls", "last"):
        s = embed_server("-t", "1", "--pooling", pooling)
        try:
            rows[pooling] = raw_rows(s, TEXTS[0])
        finally:
            assert s.stop() == 0
    tokens = rows["none"]
    assert len(tokens) > 2 and all(len(r) == 64 for r in tokens)
    mean = [sum(col) / len(tokens) for col in zip(*tokens)]
    close = lambda a, b: max(abs(x - y) for x, y in zip(a, b)) < 1e-4  # noqa: E731
    assert close(rows["mean"][0], mean)
    assert close(rows["cls"][0], tokens[0])
    assert close(rows["last"][0], tokens[-1])


def test_two_ranks_embed_as_one(mean_server):
    s = embed_server("--tp", "2", "-t", "2")
    try:
        a = raw_rows(s, TEXTS[1])[0]
    finally:
        assert s.stop() == 0
    b = raw_rows(mean_server, TEXTS[1])[0]
    assert max(abs(x - y) for x, y in zip(a, b)) < 1e-3 * max(abs(x) for x in b)


def test_each_mode_refuses_the_other(mean_server, server):
    r = mean_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert_error(r, 501)
    assert "--embeddings" in r.json()["error"]["message"]
    r = server.post("/v1/embeddings", {"input": "hi"})
    assert_error(r, 501)
    assert "--embeddings" in r.json()["error"]["message"]


def test_bad_inputs(mean_server):
    for body, param in (({}, "input"), ({"input": ""}, "input"), ({"input": [1.5]}, "input"),
                        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
                        ({"input": [99999999]}, "input")):
        assert_error(mean_server.post("/v1/embeddings", body), 400, param=param)
    s = embed_server("-t", "1", "--pooling", "none")
    try:
        assert_error(s.post("/v1/embeddings", {"input": "hi"}), 400)
    finally:
        assert s.stop() == 0
