"""A real OpenAI-compatible chat-completions server on 127.0.0.1, shared by the tests.

The real ``openai`` client talks HTTP to it, so its retries, timeouts and parsing run as they
would against OpenAI, vLLM or Ollama. A test queues behaviours (``server.push(rate_limited(),
reply("hi"))``); each POST to ``/v1/chat/completions`` (or ``/chat/completions``) takes the next
one. Every request is recorded (path, headers, JSON body) so tests can check what was sent. With
nothing queued it answers 500 with ``x-should-retry: false`` (the client does not retry), saying
so. It binds 127.0.0.1 on a free port and shuts itself down after ``lifetime_s``.

Prompt caching: ``reply(..., cached_tokens=N)`` sends ``usage.prompt_tokens_details`` as OpenAI
does; ``prefix_cached_reply()`` counts the usage from the request itself, as a provider with
automatic prompt caching would (OpenAI's rule: the longest prefix shared with an earlier request,
from 1,024 tokens on, in steps of 128; a token taken as 4 bytes here).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.prompt_cache import counted_usage

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
API_KEY = "{api_key}"  # placeholder in a body, replaced by the key the request carried
HANG_S = 3600.0  # longer than any test: a hung request is let go only when the server stops


@dataclass(frozen=True)
class Behaviour:
    """How the server answers one request."""

    status: int = 200
    body: bytes = b"{}"
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    content_type: str = "application/json"
    prefix_cache: bool = False  # usage counted from the request (``prefix_cached_reply``)


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    path: str
    headers: dict[str, str]
    body: Any  # the parsed JSON, or the raw text when it did not parse
    at: float  # time.monotonic() on arrival, to check the waits between retries


def completion(
    text: str | None,
    *,
    model: str = "fake-model",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    finish_reason: str = "stop",
    usage: bool = True,
    cached_tokens: int | None = None,
) -> dict[str, Any]:
    """A chat-completion body as OpenAI sends it (``cached_tokens``: with
    ``usage.prompt_tokens_details``, as OpenAI sends it; None: without, as vLLM and Ollama)."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": text},
            }
        ],
    }
    if usage:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if cached_tokens is not None:
            details = {"cached_tokens": cached_tokens, "audio_tokens": 0}
            body["usage"]["prompt_tokens_details"] = details
    return body


def reply(text: str | None = "ok", **fields: Any) -> Behaviour:
    """A normal 200 reply (fields: model, prompt_tokens, completion_tokens, finish_reason, usage)."""
    return Behaviour(body=json.dumps(completion(text, **fields)).encode())


def prefix_cached_reply(text: str | None = "ok", completion_tokens: int = 5) -> Behaviour:
    """A 200 reply whose usage the server counts from the request: prompt tokens at 4 bytes
    each, and cached tokens as a provider's automatic prompt cache would serve them."""
    body = completion(text, completion_tokens=completion_tokens)
    return Behaviour(body=json.dumps(body).encode(), prefix_cache=True)


def megabyte_reply(size: int = 1 << 20) -> Behaviour:
    """A 200 reply whose text is ``size`` characters."""
    return reply("x" * size, completion_tokens=size // 4)


def error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Behaviour:
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return Behaviour(status=status, body=json.dumps(body).encode(), headers=headers)


def rate_limited(retry_after_s: float = 0.01) -> Behaviour:
    """429 with ``retry-after`` (seconds; the openai client accepts fractions)."""
    return error(
        429,
        "Rate limit reached for requests",
        type_="requests",
        code="rate_limit_exceeded",
        headers=(("retry-after", f"{retry_after_s:g}"),),
    )


def server_error(status: int = 500, retry_after_s: float | None = 0.01) -> Behaviour:
    """A 5xx; with ``retry-after`` unless ``retry_after_s`` is None (then the client's backoff)."""
    headers = () if retry_after_s is None else (("retry-after", f"{retry_after_s:g}"),)
    return error(
        status,
        "The server had an error while processing your request.",
        type_="server_error",
        headers=headers,
    )


def slow(delay_s: float, then: Behaviour | None = None) -> Behaviour:
    """``then`` (a normal reply by default) after ``delay_s``: past the client's timeout."""
    base = then or reply()
    return Behaviour(base.status, base.body, base.headers, delay_s, base.content_type)


def hang() -> Behaviour:
    """No answer at all until the server stops: an endpoint that accepted the request and hung."""
    return slow(HANG_S)


def malformed() -> Behaviour:
    """A 200 whose JSON body is cut off."""
    return Behaviour(body=b'{"id": "chatcmpl-fake", "choices": [{"message": {"content": "de')


def empty_choices() -> Behaviour:
    """A 200 chat completion with no choices."""
    body = completion("unused")
    body["choices"] = []
    return Behaviour(body=json.dumps(body).encode())


def unauthorized() -> Behaviour:
    """401 that echoes the key it got, as OpenAI does (masked there; whole here, the worst case)."""
    return error(
        401,
        f"Incorrect API key provided: {API_KEY}. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        code="invalid_api_key",
    )


def model_not_found(model: str = "fake-model") -> Behaviour:
    """404 for an unknown model, in OpenAI's words."""
    return error(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        code="model_not_found",
    )


def temperature_unsupported(value: float = 0.1) -> Behaviour:
    """400 that a reasoning model sends for a temperature other than 1."""
    return error(
        400,
        f"Unsupported value: 'temperature' does not support {value:g} with this "
        "model. Only the default (1) value is supported.",
        param="temperature",
        code="unsupported_value",
    )


def max_tokens_unsupported() -> Behaviour:
    """400 that a model wanting ``max_completion_tokens`` sends for ``max_tokens``."""
    return error(
        400,
        "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        param="max_tokens",
        code="unsupported_parameter",
    )


def closed_port_url() -> str:
    """The base URL of an endpoint nobody listens on: a port bound, then closed (refuses)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@dataclass
class FakeOpenAI:
    """The server; use as a context manager (or the ``fake_openai`` fixture)."""

    lifetime_s: float = 60.0
    requests: list[RecordedRequest] = field(default_factory=list)
    _queue: list[Behaviour] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "start the server first"
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def bodies(self) -> list[Any]:
        """The JSON body of every chat request so far."""
        return [request.body for request in self.requests]

    def push(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def start(self) -> FakeOpenAI:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server = server
        serving = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-openai",
            daemon=True,
        )
        deadline = threading.Timer(self.lifetime_s, self.stop)
        deadline.daemon = True
        self._threads = [serving, deadline]
        serving.start()
        deadline.start()
        return self

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()  # ends pending delays
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            if thread is not threading.current_thread() and isinstance(thread, threading.Timer):
                thread.cancel()

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _counted(self, behaviour: Behaviour, body: Any) -> Behaviour:
        """``behaviour`` with its usage counted from the request ``body`` after the earlier
        requests, as a provider's prompt cache would serve them."""
        with self._lock:
            earlier = [request.body for request in self.requests if request.body is not body]
        return replace(behaviour, body=counted_usage(behaviour.body, body, earlier))

    def _take(self, request: RecordedRequest) -> Behaviour:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.pop(0)
        return error(
            500,
            "fake_openai: no behaviour queued for this request",
            type_="fake_openai",
            headers=(("x-should-retry", "false"),),
        )


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        fake: FakeOpenAI = self.server.fake  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        if self.path not in CHAT_PATHS:
            self._send(error(404, f"fake_openai serves only {CHAT_PATHS}, not {self.path}"), "")
            return
        try:
            body: Any = json.loads(raw)
        except ValueError:
            body = raw
        headers = {name.lower(): value for name, value in self.headers.items()}
        behaviour = fake._take(RecordedRequest(self.path, headers, body, time.monotonic()))
        if behaviour.delay_s and fake._stopping.wait(behaviour.delay_s):
            return
        key = headers.get("authorization", "").removeprefix("Bearer ")
        if behaviour.prefix_cache:
            behaviour = fake._counted(behaviour, body)
        self._send(behaviour, key)

    def _send(self, behaviour: Behaviour, key: str) -> None:
        body = behaviour.body.replace(API_KEY.encode(), key.encode())
        try:
            self.send_response(behaviour.status)
            self.send_header("content-type", behaviour.content_type)
            self.send_header("content-length", str(len(body)))
            for name, value in behaviour.headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except OSError:  # the client gave up (its timeout) and closed the connection
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass
