"""The simulator's HTTP side: OpenAI-shaped /v1/chat/completions (plain and
SSE streaming), /v1/models, /health, with OpenAI-style error objects."""

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, Optional

from ..questions.prompts import last_user_text
from .index import QuestionIndex
from .responses import decide, estimate_tokens, truncate_to_tokens

STREAM_PIECE_CHARS = 24
MAX_BODY_BYTES = 16 * 1024 * 1024


class ApiError(Exception):
    def __init__(self, status: int, message: str, error_type: str):
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass
class SimulatorConfig:
    success_rate: float = 0.8
    seed: int = 0
    latency_ms: float = 0.0
    error_rate: float = 0.0
    model: str = "simulated-model"
    api_key: Optional[str] = None
    verbose: bool = False


@dataclass
class Counters:
    requests: int = 0
    correct: int = 0
    wrong: int = 0
    not_found: int = 0
    injected_errors: int = 0
    per_question: Dict[str, int] = field(default_factory=dict)


class Simulator:
    """Decides the answer to each request. Deterministic: the outcome depends on
    the seed, the question and the request's own seed (or, without one, how
    many times that question was asked), not on thread timing."""

    def __init__(self, index: QuestionIndex, config: SimulatorConfig):
        self.index = index
        self.config = config
        self.counters = Counters()
        self._lock = threading.Lock()

    def _next_request_number(self, case_id: str) -> int:
        with self._lock:
            self.counters.requests += 1
            number = self.counters.per_question.get(case_id, 0)
            self.counters.per_question[case_id] = number + 1
            return number

    def _should_fail(self) -> bool:
        if self.config.error_rate <= 0:
            return False
        with self._lock:
            draw = random.Random(f"{self.config.seed}|error|{self.counters.requests}").random()
        return draw < self.config.error_rate

    def answer(self, body: Dict) -> Dict:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty array", "invalid_request_error")
        user_text = last_user_text(messages)
        if not user_text:
            raise ApiError(400, "no user message with text content", "invalid_request_error")
        case = self.index.find(user_text)
        if case is None:
            with self._lock:
                self.counters.requests += 1
                self.counters.not_found += 1
            raise ApiError(404, "question not found in the simulator's datasets", "not_found_error")
        number = self._next_request_number(case.case_id)
        if self._should_fail():
            with self._lock:
                self.counters.injected_errors += 1
            raise ApiError(503, "simulated server overload", "unavailable_error")
        request_seed = body.get("seed")
        key = f"seed={request_seed}" if isinstance(request_seed, int) else f"n={number}"
        rng = random.Random(f"{self.config.seed}|{case.case_id}|{key}")
        decision = decide(case, user_text, self.config.success_rate, rng)
        with self._lock:
            if decision["correct"]:
                self.counters.correct += 1
            else:
                self.counters.wrong += 1
        text, finish_reason = truncate_to_tokens(decision["text"], body.get("max_tokens"))
        prompt_tokens = sum(estimate_tokens(str(m.get("content", ""))) + 4 for m in messages if isinstance(m, dict))
        completion_tokens = estimate_tokens(text)
        return {"text": text, "finish_reason": finish_reason,
                "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                          "total_tokens": prompt_tokens + completion_tokens}}

    def stats(self) -> Dict:
        with self._lock:
            c = self.counters
            return {"requests": c.requests, "correct": c.correct, "wrong": c.wrong, "not_found": c.not_found,
                    "injected_errors": c.injected_errors, "questions_asked": len(c.per_question),
                    "questions_loaded": len(self.index)}


def _completion_body(model: str, answer: Dict) -> Dict:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer["text"]},
                         "finish_reason": answer["finish_reason"]}],
            "usage": answer["usage"]}


def _stream_chunks(model: str, answer: Dict, include_usage: bool):
    base = {"id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}
    yield dict(base, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    text = answer["text"]
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        piece = text[start:start + STREAM_PIECE_CHARS]
        yield dict(base, choices=[{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
    yield dict(base, choices=[{"index": 0, "delta": {}, "finish_reason": answer["finish_reason"]}])
    if include_usage:
        yield dict(base, choices=[], usage=answer["usage"])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: clients reuse connections
    server_version = "llama-server-simulator"
    simulator: Simulator = None  # set by make_server

    def log_message(self, format, *args):
        if self.simulator.config.verbose:
            super().log_message(format, *args)

    def _send_json(self, status: int, body: Dict) -> None:
        data = json.dumps(body).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_error(self, error: ApiError) -> None:
        self._send_json(error.status, {"error": {"message": str(error), "type": error.error_type,
                                                 "code": error.status}})

    def _authorised(self) -> bool:
        key = self.simulator.config.api_key
        return not key or self.headers.get("Authorization", "") == f"Bearer {key}"

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif not self._authorised():
            self._send_error(ApiError(401, "invalid API key", "authentication_error"))
        elif path == "/v1/models":
            self._send_json(200, {"object": "list", "data": [
                {"id": self.simulator.config.model, "object": "model", "created": 0,
                 "owned_by": "llama-server-simulator"}]})
        elif path == "/simulator/stats":
            self._send_json(200, self.simulator.stats())
        else:
            self._send_error(ApiError(404, f"no such endpoint: {path}", "not_found_error"))

    def _read_json_body(self) -> Dict:
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            raise ApiError(400, "bad Content-Length", "invalid_request_error") from None
        if length > MAX_BODY_BYTES:
            raise ApiError(413, "request body too large", "invalid_request_error")
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ApiError(400, f"malformed JSON body: {err}", "invalid_request_error") from None
        if not isinstance(body, dict):
            raise ApiError(400, "request body must be a JSON object", "invalid_request_error")
        return body

    def do_POST(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = self._read_json_body()  # always consume the body, so keep-alive stays in sync
            if not self._authorised():
                raise ApiError(401, "invalid API key", "authentication_error")
            if path not in ("/v1/chat/completions", "/chat/completions"):
                raise ApiError(404, f"no such endpoint: {path}", "not_found_error")
            answer = self.simulator.answer(body)
        except ApiError as error:
            self._send_error(error)
            return
        if self.simulator.config.latency_ms > 0:
            time.sleep(self.simulator.config.latency_ms / 1000.0)
        model = body.get("model") or self.simulator.config.model
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            self._send_stream(_stream_chunks(model, answer, include_usage))
        else:
            self._send_json(200, _completion_body(model, answer))

    def _send_stream(self, chunks) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the end of the stream is the end of the connection
        self.end_headers()
        self.close_connection = True
        for chunk in chunks:
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode("utf-8"))
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def make_server(host: str, port: int, simulator: Simulator) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"simulator": simulator})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server
