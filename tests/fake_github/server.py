"""The HTTP server: lifecycle, the PyGithub client, fault injection, recorded requests, dispatch."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from .errors import ApiError
from .render import Render
from .routes import ROUTES, Call, Reply
from .seed import Seeding
from .state import LEVELS, RATE_LIMIT, State, User

if TYPE_CHECKING:
    import github

API_PREFIX = "/api/v3"
SECONDARY_RATE_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID FAKE:0001."
)


@dataclass
class RecordedRequest:
    """One request as the server received it, and the status it got."""

    method: str
    path: str  # under /api/v3, without the query
    query: dict[str, str]
    body: Any  # the parsed JSON, or the raw text
    login: str | None  # whose token it carried (None: no token or an unknown one)
    status: int = 0
    at: float = 0.0  # time.monotonic() on arrival


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    reply: Reply
    times: int


@dataclass
class FakeGitHub(Seeding):
    """The server; use as a context manager (or the ``fake_github`` fixture). Seeding and
    reading the state back are ``Seeding``'s (seed.py)."""

    lifetime_s: float = 120.0
    state: State = field(default_factory=State)
    requests: list[RecordedRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the fake's own bugs, as 500s
    _faults: list[Fault] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _server: ThreadingHTTPServer | None = None
    _timer: threading.Timer | None = None
    _port: int = 0  # kept after stop, so URLs can still be named

    # -- lifecycle

    @property
    def root(self) -> str:
        assert self._port, "start the server first"
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        """What ``Github(base_url=...)`` and ``GITHUB_API_URL`` take, GitHub Enterprise style."""
        return self.root + API_PREFIX

    def start(self) -> FakeGitHub:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server, self._port = server, server.server_address[1]
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-github",
            daemon=True,
        ).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, token: str | None = None, **options: Any) -> github.Github:
        """A PyGithub client for this server, with settings that keep tests fast.

        PyGithub waits 0.25 s between requests and 1 s between writes by default, and its
        default retry sleeps 60 s on a secondary rate limit without ``Retry-After``; here both
        are off or short (override any of them through ``options``).
        """
        import github

        settings: dict[str, Any] = {
            "base_url": self.base_url,
            "timeout": 10,
            "seconds_between_requests": None,
            "seconds_between_writes": None,
            "retry": github.GithubRetry(total=3, secondary_rate_wait=0.01),
        }
        settings.update(options)
        return github.Github(auth=github.Auth.Token(token) if token else None, **settings)

    def pull_event(
        self,
        full_name: str,
        number: int,
        action: str = "opened",
        label: str | None = None,
        sender: str | None = None,
    ) -> dict[str, Any]:
        """The ``pull_request`` webhook payload (what ``GITHUB_EVENT_PATH`` holds) for a PR."""
        with self._lock:
            repo = self.state.repo(full_name)
            issue = repo.pull(number)
            render = Render(self.state, self.base_url, self.root, None)
            payload = {
                "action": action,
                "number": number,
                "pull_request": render.pull(repo, issue),
                "repository": render.repo(repo),
                "sender": render.user(sender or issue.author),
            }
            if label is not None:
                payload["label"] = render.label(repo, repo.label(label, self.state.next_id).name)
            return payload

    # -- faults and recorded requests

    def fail_next(
        self,
        method: str,
        path_pattern: str,
        status: int,
        body: Any = None,
        *,
        times: int = 1,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer the next ``times`` requests of ``method`` whose path (under /api/v3, without
        the query) matches the regex ``path_pattern`` with ``status``; ``body`` is a message, a
        dict, or None for GitHub's body for that status."""
        if body is None or isinstance(body, str):
            body = ApiError(status, body or HTTPStatus(status).phrase).body()
        with self._lock:
            self._faults.append(
                Fault(
                    method.upper(),
                    re.compile(path_pattern),
                    Reply(status, body, dict(headers or {})),
                    times,
                )
            )

    def secondary_rate_limit(
        self, method: str, path_pattern: str, retry_after: int | None = None, times: int = 1
    ) -> None:
        """GitHub's 403 for a secondary rate limit, with ``retry-after`` when given."""
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        self.fail_next(
            method, path_pattern, 403, SECONDARY_RATE_LIMIT_MESSAGE, times=times, headers=headers
        )

    def calls(self, method: str, path_pattern: str = "") -> list[RecordedRequest]:
        """The recorded requests of ``method`` whose path matches ``path_pattern``."""
        with self._lock:
            return [
                r
                for r in self.requests
                if r.method == method.upper() and re.search(path_pattern, r.path)
            ]

    # -- dispatch

    def handle(self, method: str, target: str, body: Any, token: str | None) -> Reply:
        url = urllib.parse.urlsplit(target)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        path = url.path.removeprefix(API_PREFIX) if url.path.startswith(API_PREFIX) else None
        with self._lock:
            user = self.state.users.get(self.state.tokens.get(token or "", ""))
            record = RecordedRequest(
                method,
                path or url.path,
                query,
                body,
                user.login if user else None,
                at=time.monotonic(),
            )
            self.requests.append(record)
            self.state.rate_remaining = max(0, self.state.rate_remaining - 1)
            reply = self._reply(method, path, query, body, token, user)
            record.status = reply.status
            reply.headers = self._rate_headers() | reply.headers
            return reply

    def _reply(
        self,
        method: str,
        path: str | None,
        query: dict[str, str],
        body: Any,
        token: str | None,
        user: User | None,
    ) -> Reply:
        if path is None:
            return _error(ApiError(404, f"fake_github serves only {API_PREFIX}/..."))
        for fault in self._faults:
            if fault.method == method and fault.times > 0 and fault.pattern.search(path):
                fault.times -= 1
                return Reply(fault.reply.status, fault.reply.body, dict(fault.reply.headers))
        if token is not None and user is None:
            return _error(ApiError(401, "Bad credentials"))
        for candidate in ROUTES:
            match = candidate.pattern.match(path)
            if candidate.method != method or match is None:
                continue
            params = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items()}
            call = Call(
                self.state,
                Render(self.state, self.base_url, self.root, user),
                method,
                path,
                params,
                query,
                {} if body is None else body,
                user,
            )
            try:
                if "owner" in params:
                    self._authorize(call, candidate.write)
                return candidate.handler(call)
            except ApiError as error:
                return _error(error)
            except Exception as bug:  # the fake's own bug: a 500 here, and in ``errors``
                self.errors.append(f"{method} {path}: {bug!r}")
                return _error(ApiError(500, f"fake_github bug: {bug!r}"))
        return _error(ApiError(404, "Not Found"))

    def _authorize(self, call: Call, write: bool) -> None:
        repo = call.repo  # 404 for a missing repository, before any permission question
        level = LEVELS[self.state.permission(call.user, repo)]
        if level < 1:
            raise ApiError(404, "Not Found")  # GitHub hides what a caller may not read
        if write and call.user is None:
            raise ApiError(401, "Requires authentication")
        if write and level < 2:
            kind = "integration" if call.user and call.user.app else "personal access token"
            raise ApiError(403, f"Resource not accessible by {kind}")

    def _rate_headers(self) -> dict[str, str]:
        remaining = self.state.rate_remaining
        return {
            "x-ratelimit-limit": str(RATE_LIMIT),
            "x-ratelimit-remaining": str(remaining),
            "x-ratelimit-reset": str(self.state.rate_reset),
            "x-ratelimit-used": str(RATE_LIMIT - remaining),
            "x-ratelimit-resource": "core",
            "x-github-request-id": f"FAKE:{len(self.requests):04d}",
        }


def _error(error: ApiError) -> Reply:
    return Reply(error.status, error.body())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as PyGithub's pooled connections expect
    timeout = 10  # an idle kept-alive connection is closed after this

    def _serve(self) -> None:
        fake: FakeGitHub = self.server.fake  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        scheme, _, credential = (self.headers.get("authorization") or "").partition(" ")
        token = credential.strip() if scheme.lower() in ("token", "bearer") else ""
        reply = fake.handle(self.command, self.path, body, token or None)
        data = b"" if reply.status == 204 else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up and closed the connection
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass
