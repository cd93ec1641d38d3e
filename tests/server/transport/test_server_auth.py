"""--api-key: 401 with an error object without the right key."""

import pytest
import requests

from server_harness import ServerProcess, assert_error


@pytest.fixture(scope="module")
def keyed():
    s = ServerProcess("-np", "1", "-c", "512", "-t", "1", api_key="sekrit-123")
    yield s
    assert s.stop() == 0


def test_missing_key(keyed):
    r = requests.post(keyed.base + "/v1/completions", json={"prompt": "x", "max_tokens": 1}, timeout=30)
    err = assert_error(r, 401)
    assert err["code"] == "invalid_api_key"


def test_wrong_key(keyed):
    for h in ({"Authorization": "Bearer nope"}, {"Authorization": "sekrit-123"}, {"X-Api-Key": "nope"},
              {"Authorization": "Bearer sekrit-1234"}):
        r = requests.post(keyed.base + "/v1/chat/completions", headers=h,
                          json={"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}, timeout=30)
        assert_error(r, 401)
    assert_error(requests.get(keyed.base + "/v1/models", timeout=30), 401)


def test_right_key(keyed):
    r = keyed.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
    assert r.status_code == 200, r.text
    r = requests.get(keyed.base + "/v1/models", headers={"X-Api-Key": "sekrit-123"}, timeout=30)
    assert r.status_code == 200


def test_health_is_public(keyed):
    assert requests.get(keyed.base + "/health", timeout=30).status_code == 200


def test_key_file(tmp_path):
    f = tmp_path / "keys.txt"
    f.write_text("# keys\nfirst-key\n\nsecond-key\n")
    s = ServerProcess("-np", "1", "-c", "256", "-t", "1", "--api-key-file", str(f))
    try:
        for k in ("first-key", "second-key"):
            r = requests.post(s.base + "/v1/completions", headers={"Authorization": f"Bearer {k}"},
                              json={"prompt": "x", "max_tokens": 1}, timeout=30)
            assert r.status_code == 200, r.text
        assert_error(requests.post(s.base + "/v1/completions", json={"prompt": "x"}, timeout=30), 401)
    finally:
        assert s.stop() == 0
