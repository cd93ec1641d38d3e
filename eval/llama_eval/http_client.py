"""Talking to an OpenAI-compatible chat endpoint, with per-request timeouts,
retries with exponential back-off, and an error taxonomy the scheduler uses to
tell a broken server from a bad request."""

import json
import random
import threading
import time
from dataclasses import dataclass
from typing import Optional
from urllib.parse import urlsplit, urlunsplit

import requests

from .errors import UsageError

TRANSPORT = "transport"  # no usable HTTP answer: refused, reset, timed out
SERVER = "server"        # 5xx, 408, 429 or a malformed body: worth retrying
CLIENT = "client"        # other 4xx: this request will never succeed here
MAX_BACKOFF_S = 30.0


class RequestFailure(Exception):
    def __init__(self, kind: str, message: str, status: Optional[int] = None):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.attempts = 1


@dataclass
class Completion:
    content: str
    reasoning: Optional[str] = None
    finish_reason: Optional[str] = None
    usage: Optional[dict] = None
    model: Optional[str] = None
    latency_s: float = 0.0
    ttft_s: Optional[float] = None
    attempts: int = 1


def normalise_server_url(url: str) -> str:
    """"http://host:port[/v1][/]" -> "http://host:port"; rejects anything else."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"bad server URL {url!r}: expected http://HOST:PORT")
    try:
        parts.port
    except ValueError:
        raise UsageError(f"bad server URL {url!r}: invalid port") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def _error_message(response: requests.Response) -> str:
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            return f"HTTP {response.status_code}: {error['message']}"
        if isinstance(error, str):
            return f"HTTP {response.status_code}: {error}"
    except ValueError:
        pass
    return f"HTTP {response.status_code}: {response.text[:200].strip()}"


def _completion_from_body(body) -> Completion:
    try:
        choice = body["choices"][0]
        message = choice.get("message") or {}
        content = message.get("content")
        return Completion(content=content if isinstance(content, str) else "",
                          reasoning=message.get("reasoning_content"),
                          finish_reason=choice.get("finish_reason"),
                          usage=body.get("usage"), model=body.get("model"))
    except (KeyError, IndexError, TypeError, AttributeError):
        raise RequestFailure(SERVER, f"response is not a chat completion: {str(body)[:200]}") from None


class ChatClient:
    """One server's chat endpoint; safe to share between threads (one
    keep-alive connection pool per thread)."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout_s: float = 600.0,
                 retries: int = 3, backoff_s: float = 1.0, stream: bool = False):
        self.base_url = base_url
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.stream = stream
        self._local = threading.local()

    def _http(self) -> requests.Session:
        pool = getattr(self._local, "pool", None)
        if pool is None:
            pool = requests.Session()
            pool.trust_env = False  # never route through a proxy from the environment
            self._local.pool = pool
        return pool

    def _headers(self) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def list_models(self, timeout_s: float = 5.0) -> list:
        response = self._http().get(f"{self.base_url}/v1/models", headers=self._headers(), timeout=timeout_s)
        response.raise_for_status()
        return [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]

    def complete_once(self, payload: dict) -> Completion:
        payload = dict(payload, stream=self.stream)
        if self.stream:
            payload.setdefault("stream_options", {"include_usage": True})
        started = time.monotonic()
        try:
            response = self._http().post(f"{self.base_url}/v1/chat/completions", data=json.dumps(payload),
                                            headers=self._headers(), timeout=self.timeout_s, stream=self.stream)
            with response:
                if response.status_code >= 400:
                    kind = SERVER if response.status_code >= 500 or response.status_code in (408, 429) else CLIENT
                    raise RequestFailure(kind, _error_message(response), response.status_code)
                completion = self._read_stream(response, started) if self.stream else self._read_body(response)
        except requests.Timeout:
            raise RequestFailure(TRANSPORT, f"no answer within {self.timeout_s:g} s") from None
        except requests.RequestException as err:
            raise RequestFailure(TRANSPORT, f"connection failed: {type(err).__name__}: {_root_cause(err)}") from None
        completion.latency_s = time.monotonic() - started
        return completion

    @staticmethod
    def _read_body(response: requests.Response) -> Completion:
        try:
            body = response.json()
        except ValueError:
            raise RequestFailure(SERVER, f"response is not JSON: {response.text[:200]!r}") from None
        return _completion_from_body(body)

    @staticmethod
    def _read_stream(response: requests.Response, started: float) -> Completion:
        pieces, reasoning, completion, done = [], [], Completion(content=""), False
        for raw in response.iter_lines(decode_unicode=False):
            line = raw.decode("utf-8", errors="replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                raise RequestFailure(SERVER, f"malformed stream chunk: {data[:200]!r}") from None
            if "error" in chunk:
                raise RequestFailure(SERVER, f"error in stream: {str(chunk['error'])[:200]}")
            completion.usage = chunk.get("usage") or completion.usage
            completion.model = chunk.get("model") or completion.model
            for choice in chunk.get("choices") or []:
                delta = choice.get("delta") or {}
                if delta.get("content"):
                    if completion.ttft_s is None:
                        completion.ttft_s = time.monotonic() - started
                    pieces.append(delta["content"])
                if delta.get("reasoning_content"):
                    reasoning.append(delta["reasoning_content"])
                completion.finish_reason = choice.get("finish_reason") or completion.finish_reason
        if not done:
            raise RequestFailure(TRANSPORT, "stream ended before [DONE]")
        completion.content = "".join(pieces)
        completion.reasoning = "".join(reasoning) or None
        return completion

    def complete(self, payload: dict, should_stop=lambda: False) -> Completion:
        """complete_once with retries; raises the last RequestFailure."""
        attempt = 0
        while True:
            try:
                completion = self.complete_once(payload)
                completion.attempts = attempt + 1
                return completion
            except RequestFailure as failure:
                if failure.kind == CLIENT or attempt >= self.retries or should_stop():
                    failure.attempts = attempt + 1
                    raise
            delay = min(MAX_BACKOFF_S, self.backoff_s * (2 ** attempt)) * random.uniform(0.5, 1.0)
            time.sleep(delay)
            attempt += 1


def _root_cause(err: BaseException) -> str:
    # requests nests urllib3 errors several levels deep; the innermost says what happened.
    seen = err
    for _ in range(10):
        inner = getattr(seen, "reason", None) or seen.__context__
        if not isinstance(inner, BaseException) or inner is seen:
            break
        seen = inner
    return str(seen)[:200]
