"""GET /metrics: Prometheus text format with request, token and slot figures."""


from server_harness import ServerProcess, parse_metrics


def test_metrics_format_and_counts(server):
    before = parse_metrics(server.get("/metrics").text)
    r = server.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 5, "ignore_eos": True})
    assert r.status_code == 200
    server.post("/v1/completions", {"prompt": 5})  # a 400
    res = server.get("/metrics")
    assert res.status_code == 200
    assert res.headers["Content-Type"].startswith("text/plain")
    after = parse_metrics(res.text)

    ok = 'llamatp_requests_total{endpoint="/v1/completions",status="200"}'
    bad = 'llamatp_requests_total{endpoint="/v1/completions",status="400"}'
    assert after[ok] >= before.get(ok, 0) + 1
    assert after[bad] >= before.get(bad, 0) + 1
    assert after["llamatp_tokens_predicted_total"] >= before["llamatp_tokens_predicted_total"] + 5
    assert after["llamatp_prompt_tokens_total"] > before["llamatp_prompt_tokens_total"]
    assert after["llamatp_slots_total"] == 4
    assert 0 <= after["llamatp_slots_busy"] <= 4
    assert after["llamatp_requests_queued"] >= 0
    assert after["llamatp_predicted_tokens_per_second"] > 0
    assert after["llamatp_prompt_tokens_per_second"] > 0
    # llama-server's series, under its names.
    assert after["llamacpp:tokens_predicted_total"] >= before["llamacpp:tokens_predicted_total"] + 5
    assert after["llamacpp:prompt_tokens_total"] == after["llamatp_prompt_tokens_total"]
    assert after["llamacpp:n_decode_total"] == after["llamatp_decode_steps_total"]
    assert after["llamacpp:n_tokens_max"] >= 5
    assert after["llamacpp:prompt_seconds_total"] > 0 and after["llamacpp:tokens_predicted_seconds_total"] > 0
    for g in ("prompt_tokens_seconds", "predicted_tokens_seconds", "requests_processing", "requests_deferred",
              "n_busy_slots_per_decode"):
        assert f"llamacpp:{g}" in after, g


def test_unknown_paths_share_one_series(server):
    server.get("/no/such/path/1")
    server.get("/no/such/path/2")
    values = parse_metrics(server.get("/metrics").text)
    assert values['llamatp_requests_total{endpoint="other",status="404"}'] >= 2
    assert not any("/no/such" in k for k in values)


def test_metrics_need_the_api_key():
    s = ServerProcess("-t", "1", "--metrics", api_key="k1")
    try:
        import requests
        assert requests.get(s.base + "/metrics", timeout=10).status_code == 401
        assert s.get("/metrics").status_code == 200
    finally:
        assert s.stop() == 0


def test_metrics_count_collectives_per_rank():
    srv = ServerProcess("--tp", "2", "-t", "2", "-c", "512", "--metrics")
    try:
        before = parse_metrics(srv.get("/metrics").text)
        r = srv.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4, "ignore_eos": True,
                                         "temperature": 0})
        assert r.status_code == 200, r.text
        after = parse_metrics(srv.get("/metrics").text)
        for rank in (0, 1):
            calls = f'llamatp_collective_calls_total{{rank="{rank}"}}'
            # Every decode step runs 2 AllReduces per layer (5 layers) plus the embedding's.
            assert after[calls] >= before.get(calls, 0) + 4 * 11
            assert after[f'llamatp_collective_seconds_total{{rank="{rank}"}}'] > 0
    finally:
        srv.stop()
