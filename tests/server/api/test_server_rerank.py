"""--rerank: /rerank and its aliases in Jina's and TEI's shapes, scored by a
generated Qwen3 reranker's classification head, the same from one rank and
from two, and the inputs and modes refused."""

import subprocess

import pytest

from server_harness import ServerProcess, assert_error, generated_model, model_path, server_bin

QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "The dog ran to the park.", "Berlin is in Germany.", "Once upon a time"]


@pytest.fixture(scope="module")
def reranker(tmp_path_factory):
    return generated_model(tmp_path_factory.mktemp("rerank") / "reranker.gguf", arch="qwen3", weight_type="f32",
                           extra=["--reranker"])


@pytest.fixture(scope="module")
def rerank_server(reranker):
    s = ServerProcess("-np", "2", "-c", "1024", "-t", "1", "--rerank", model=reranker)
    yield s
    assert s.stop() == 0


def scores(server, path="/v1/rerank"):
    r = server.post(path, {"query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    return {e["index"]: e["relevance_score"] for e in r.json()["results"]}


def test_jina_shape(rerank_server):
    r = rerank_server.post("/v1/rerank", {"model": "my-reranker", "query": QUERY, "documents": DOCS})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["model"] == "my-reranker" and body["object"] == "list"
    results = body["results"]
    assert sorted(e["index"] for e in results) == list(range(len(DOCS)))
    got = [e["relevance_score"] for e in results]
    assert got == sorted(got, reverse=True), "best first"
    assert all(0.0 < s < 1.0 for s in got)  # the softmax of "yes" against "no"
    assert max(got) - min(got) > 1e-3, "the documents should not all score alike"
    assert body["usage"]["prompt_tokens"] == body["usage"]["total_tokens"] > 4 * len(DOCS)
    assert {p: scores(rerank_server, p) for p in ("/rerank", "/reranking", "/v1/reranking")} == \
        {p: scores(rerank_server) for p in ("/rerank", "/reranking", "/v1/reranking")}


def test_a_document_scores_alike_alone_and_among_others(rerank_server):
    together = scores(rerank_server)
    for i, d in enumerate(DOCS):
        r = rerank_server.post("/rerank", {"query": QUERY, "documents": [d]})
        assert r.status_code == 200, r.text
        [alone] = r.json()["results"]
        assert alone["index"] == 0 and abs(alone["relevance_score"] - together[i]) < 1e-5


def test_top_n(rerank_server):
    every = rerank_server.post("/rerank", {"query": QUERY, "documents": DOCS}).json()["results"]
    r = rerank_server.post("/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2})
    assert r.status_code == 200, r.text
    assert r.json()["results"] == every[:2]
    assert len(rerank_server.post("/rerank", {"query": QUERY, "documents": DOCS, "top_n": 99}).json()["results"]) == 4


def test_tei_shape(rerank_server):
    jina = scores(rerank_server)
    r = rerank_server.post("/rerank", {"query": QUERY, "texts": DOCS, "return_text": True})
    assert r.status_code == 200, r.text
    results = r.json()
    assert isinstance(results, list) and len(results) == len(DOCS)
    for e in results:
        assert e["text"] == DOCS[e["index"]] and abs(e["score"] - jina[e["index"]]) < 1e-6
    plain = rerank_server.post("/rerank", {"query": QUERY, "texts": DOCS}).json()
    assert all("text" not in e for e in plain)


def test_bad_inputs(rerank_server):
    for body, param in (({"documents": DOCS}, "query"), ({"query": 3, "documents": DOCS}, "query"),
                        ({"query": QUERY}, "documents"), ({"query": QUERY, "documents": []}, "documents"),
                        ({"query": QUERY, "documents": ["a", 2]}, "documents"),
                        ({"query": QUERY, "texts": "a"}, "texts"),
                        ({"query": QUERY, "documents": DOCS, "top_n": -1}, "top_n"),
                        ({"query": QUERY, "documents": DOCS, "top_n": "2"}, "top_n")):
        assert_error(rerank_server.post("/v1/rerank", body), 400, param=param)
    assert_error(rerank_server.post("/v1/rerank", {"query": QUERY, "documents": ["word " * 2000]}), 400)
    assert rerank_server.get("/health").status_code == 200


def test_the_modes_refuse_each_other(rerank_server, server):
    r = rerank_server.post("/v1/embeddings", {"input": "hi"})
    assert_error(r, 501)
    assert "--rerank" in r.json()["error"]["message"]
    assert_error(rerank_server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}), 501)
    r = server.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
    assert_error(r, 501)
    assert "--rerank" in r.json()["error"]["message"]


def test_two_ranks_rerank_as_one(reranker, rerank_server):
    s = ServerProcess("-c", "1024", "--tp", "2", "-t", "2", "--rerank", model=reranker)
    try:
        two = scores(s)
    finally:
        assert s.stop() == 0
    one = scores(rerank_server)
    assert max(abs(one[i] - two[i]) for i in one) < 1e-4


def test_a_reranker_ranks_without_the_flag(reranker, rerank_server):
    s = ServerProcess("-c", "1024", "-t", "1", "--embeddings", model=reranker)
    try:
        got = scores(s)
    finally:
        assert s.stop() == 0
    assert got == pytest.approx(scores(rerank_server), abs=1e-6)


def test_a_model_without_a_head_is_refused():
    p = subprocess.run([str(server_bin()), "-m", str(model_path()), "--rerank", "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "classification head" in p.stdout + p.stderr
