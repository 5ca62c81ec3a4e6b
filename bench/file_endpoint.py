"""``python -m bench file-endpoint``: an OpenAI-compatible endpoint on loopback whose replies
are files, so that a person, or another model with a file tool, can play the model behind
kernelpilot's agent team (the real-model check, bench/BENCHMARKS.md).

Each ``POST /v1/chat/completions`` is written to the folder as ``NNNN-<role>.request.md`` (the
messages, for reading) and ``NNNN-<role>.request.json`` (the request's body), and a line on the
console names the file to write: ``NNNN-<role>.reply.md``. Its whole text is the assistant's
message, taken once the file is non-empty and has not changed for ``settle_s`` (an editor's
save, or a file written elsewhere and moved in). Token usage is what the answerer reports in
an optional ``NNNN-<role>.usage.json`` written before the reply (``{"prompt_tokens": N,
"completion_tokens": M}``), else omitted: kernelpilot then counts an upper bound and says so.
No reply within ``timeout_s``: a 504 naming the file. The openai client asks again after its
own timeout with the very same body: that request joins the one still waiting (same files),
so a slow answer is never asked twice. ``GET /v1/models`` lists ``--model``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")
ROLE_LINE = re.compile(r"^# Your role: (\w+)", re.MULTILINE)  # prompts/{planner,coder,debugger}.md
RETRY_HEADER = "x-stainless-retry-count"  # the openai client's (and kernelpilot's) retries
NUMBERED = re.compile(r"^(\d{4,})-\w+\.request\.json$")


@dataclass(frozen=True)
class Answer:
    """The reply file's text and the usage the answerer reported (None: omitted)."""

    text: str
    usage: dict[str, int] | None


class NoReply(Exception):
    """No reply file within the endpoint's timeout."""


class FileEndpoint:
    """Requests out to files, replies in from files; one per folder, shared by the server's
    threads."""

    def __init__(
        self,
        folder: Path,
        *,
        model: str = "file-endpoint",
        timeout_s: float = 3600.0,
        settle_s: float = 0.5,
        poll_s: float = 0.2,
        say: Callable[[str], None] | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.model = folder.resolve(), model
        self.timeout_s, self.settle_s, self.poll_s = timeout_s, settle_s, poll_s
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self._lock = threading.Lock()
        self._waiting: dict[str, str] = {}  # request digest -> its stem, while unanswered
        self._answered: dict[str, str] = {}  # and once answered, for a retry that comes late
        # A folder used before keeps its files: numbering goes on after them.
        taken = [int(m[1]) for f in self.folder.iterdir() if (m := NUMBERED.match(f.name))]
        self._next = max(taken, default=0) + 1

    def ask(self, body: dict[str, Any], retry: bool = False) -> tuple[str, bool]:
        """The stem (``NNNN-role``) this request's files go by, and whether it is new. False:
        the same body as a request still waiting, which it joins, or a ``retry`` (the client
        says so) of one answered since, which gets the same reply. The same prompt asked
        afresh, answered or not, is a new request: two children may come of one prompt."""
        digest = _digest(body)
        with self._lock:
            if digest in self._waiting:
                return self._waiting[digest], False
            if retry and digest in self._answered:
                return self._answered[digest], False
            stem = f"{self._next:04d}-{request_role(body)}"
            self._next += 1
            self._waiting[digest] = stem
        (self.folder / f"{stem}.request.json").write_text(json.dumps(body, indent=1))
        (self.folder / f"{stem}.request.md").write_text(self.readable(stem, body))
        return stem, True

    def answered(self, body: dict[str, Any], stem: str) -> None:
        digest = _digest(body)
        with self._lock:
            self._waiting.pop(digest, None)
            self._answered[digest] = stem

    def wait(self, stem: str) -> Answer:
        """The reply once its file is complete; NoReply after ``timeout_s``."""
        reply = self.folder / f"{stem}.reply.md"
        deadline, seen = time.monotonic() + self.timeout_s, None
        while time.monotonic() < deadline:
            try:
                stat = reply.stat()
            except FileNotFoundError:
                stat = None
            state = (stat.st_size, stat.st_mtime_ns) if stat and stat.st_size else None
            if state is not None and state == seen:
                return Answer(reply.read_text(encoding="utf-8"), self._usage(stem))
            seen = state
            time.sleep(self.settle_s if state else self.poll_s)
        raise NoReply(f"no reply in {reply} within {self.timeout_s:g} s")

    def _usage(self, stem: str) -> dict[str, int] | None:
        path = self.folder / f"{stem}.usage.json"
        if not path.exists():
            return None
        try:
            given = json.loads(path.read_text())
            usage = {key: int(given[key]) for key in ("prompt_tokens", "completion_tokens")}
        except (ValueError, KeyError, TypeError) as err:
            self.say(f"{stem}: {path.name} ignored, usage omitted: it must be JSON with integer "
                     f"prompt_tokens and completion_tokens ({type(err).__name__}: {err})")  # fmt: skip
            return None
        return {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}

    def readable(self, stem: str, body: dict[str, Any]) -> str:
        """The request as a person reads it: what to write where, then each message whole."""
        messages = body.get("messages", [])
        asked = ", ".join(f"{key} {body[key]}" for key in ("model", "temperature", "max_tokens",
                          "max_completion_tokens", "reasoning_effort") if key in body)  # fmt: skip
        lines = [
            f"# Request {stem} from kernelpilot ({asked})",
            "",
            "Answer as the model would: write the assistant's whole reply to",
            "",
            f"    {self.folder / f'{stem}.reply.md'}",
            "",
            f"It is taken once it is non-empty and unchanged for {self.settle_s:g} s (save it "
            "once, or write it elsewhere and move it in). Optional, written before it: "
            f'{stem}.usage.json, {{"prompt_tokens": N, "completion_tokens": M}}, the tokens '
            f"your model counted. The request as JSON: {stem}.request.json.",
        ]
        for number, message in enumerate(messages, 1):
            lines += ["", f"======== message {number} of {len(messages)}: "
                      f"{message.get('role', '?')} ========", "", content_text(message)]  # fmt: skip
        return "\n".join(lines) + "\n"

    def completion(self, body: dict[str, Any], stem: str, answer: Answer) -> dict[str, Any]:
        """The chat-completion body the client reads."""
        reply: dict[str, Any] = {
            "id": f"chatcmpl-file-{stem}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or self.model,
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": answer.text},
                }
            ],
        }
        if answer.usage is not None:
            reply["usage"] = answer.usage
        return reply


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def request_role(body: dict[str, Any]) -> str:
    """The role a request is for (planner, coder, debugger), read from its prompt's heading;
    'model' where none says."""
    for message in reversed(body.get("messages", [])):
        found = ROLE_LINE.search(content_text(message))
        if found:
            return found[1].lower()
    return "model"


def content_text(message: dict[str, Any]) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def serve(endpoint: FileEndpoint, port: int = 0) -> ThreadingHTTPServer:
    """A server for ``endpoint`` on 127.0.0.1 (loopback only: prompts hold the user's code);
    port 0 takes a free one. The caller runs ``serve_forever`` and ``shutdown``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # our own lines instead
            pass

        def do_GET(self) -> None:
            if self.path.split("?")[0] not in MODELS_PATHS:
                return self.error(404, f"no such path {self.path}: GET /v1/models")
            entry = {"id": endpoint.model, "object": "model", "created": 0, "owned_by": "files"}
            self.send_json(200, {"object": "list", "data": [entry]})

        def do_POST(self) -> None:
            if self.path.split("?")[0] not in CHAT_PATHS:
                return self.error(404, f"no such path {self.path}: POST /v1/chat/completions")
            length = int(self.headers.get("content-length") or 0)
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError as err:
                return self.error(400, f"the request body is not JSON: {err}")
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                return self.error(400, "the request has no `messages` list")
            if body.get("stream"):
                return self.error(400, "the file endpoint does not stream: send stream=false")
            retry = (self.headers.get(RETRY_HEADER) or "0") != "0"
            stem, new = endpoint.ask(body, retry)
            reply = endpoint.folder / f"{stem}.reply.md"
            endpoint.say(f"{stem}: {'waiting' if new else 'asked again (a retry), still waiting'}"
                         f" for {reply}  (request: {stem}.request.md)")  # fmt: skip
            try:
                answer = endpoint.wait(stem)
            except NoReply as err:
                endpoint.say(f"{stem}: {err}; answering 504 (the request stays open for a retry)")
                return self.error(504, f"{err}: write it, the client's retry will take it")
            endpoint.answered(body, stem)
            endpoint.say(f"{stem}: answered ({len(answer.text)} characters)")
            try:
                self.send_json(200, endpoint.completion(body, stem, answer))
            except (BrokenPipeError, ConnectionResetError):  # the client gave up waiting
                endpoint.say(f"{stem}: the client had hung up; its retry gets the same reply")

        def error(self, status: int, message: str) -> None:
            kind = "invalid_request_error" if status < 500 else "server_error"
            self.send_json(status, {"error": {"message": message, "type": kind}})

        def send_json(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    return server


@click.command()
@click.option("--folder", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Where requests are written and replies read (made if missing; numbering "
              "goes on after the files already there).")  # fmt: skip
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port on 127.0.0.1 (0: a free one).")  # fmt: skip
@click.option("--model", default="file-endpoint", show_default=True,
              help="The model name /v1/models lists (any name asked for is answered).")  # fmt: skip
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0, min_open=True),
              default=3600.0, show_default=True, help="Seconds to wait for a reply file before "
              "answering 504 (the request stays open: the client's retry waits on the same "
              "file).")  # fmt: skip
@click.option("--settle", "settle_s", type=click.FloatRange(min=0), default=0.5,
              show_default=True, help="A reply file is taken once unchanged this long.")  # fmt: skip
def cli(folder: Path, port: int, model: str, timeout_s: float, settle_s: float) -> None:
    """Serve kernelpilot's LLM calls through files: a person or another model answers."""
    endpoint = FileEndpoint(folder, model=model, timeout_s=timeout_s, settle_s=settle_s)
    server = serve(endpoint, port)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    endpoint.say(
        f"file endpoint at {url}: requests and replies in {endpoint.folder}\n"
        f"  run a search against it (no key needed):\n"
        f"    OPENAI_BASE_URL={url} kernelpilot optimize PROBLEM --llm openai "
        f"--model {model} --out OUT\n"
        f"  then answer each NNNN-<role>.request.md with NNNN-<role>.reply.md; Ctrl-C stops"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        endpoint.say("stopped")
    finally:
        server.server_close()
