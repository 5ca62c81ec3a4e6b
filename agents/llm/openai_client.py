"""``LLMClient`` for any OpenAI-compatible chat-completions endpoint, on the ``openai`` package.

Every request is sent once by the ``openai`` client (``max_retries=0``), and the retries are
ours, on the client's own rules (``agents.llm.retries``: 408, 409, 429, every 5xx, connection
errors and timeouts, ``max_retries`` times, after the server's ``retry-after`` or a backoff of
0.5 s doubling to 8 s), and also on a 200 whose body is not a chat completion, which the client
cannot see. Taking them into our hands lets every attempt honour the caller's deadline (each
request's timeout is ``min(timeout_s, time left)``, and no retry starts whose wait would pass
it) and be reported while it runs: each attempt, each wait, and a heartbeat every 30 s while a
request is outstanding (``progress``). An error that no retry can mend (a bad key, a quota used
up) is not retried. The deadline bounds each wait for the server's bytes, as httpx timeouts do:
a server that trickles a reply byte by byte could outlast it.

On top of that, a 400 that names a parameter the model does not take (``temperature`` on
reasoning models, ``max_tokens`` where ``max_completion_tokens`` is wanted) is asked again once
without it, and remembered for every later call (``agents.llm.request``). An endpoint that
cannot be reached before any request of this client got an answer (connection refused, no such
host) is fatal for the run. The reply's body is read by ``agents.llm.completion``.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import openai

from agents.llm.client import (
    OPENAI_BASE_URL,
    Deadline,
    LLMCallFailed,
    LLMConfig,
    LLMDeadlineReached,
    LLMFatalError,
    Message,
    Progress,
    Reply,
    Role,
)
from agents.llm.completion import BadReply, ReplyReader
from agents.llm.failures import (
    CallContext,
    connection_failure,
    count,
    error_message,
    malformed_failure,
    redact,
    status_failure,
)
from agents.llm.heartbeat import HEARTBEAT_S, Heartbeat
from agents.llm.request import RequestShape
from agents.llm.retries import retryable, wait_before_retry
from harness.sandbox.redact import scrub

log = logging.getLogger(__name__)

# Local servers (vLLM, Ollama, llama.cpp) take any key, but the openai client refuses an empty one.
_KEYLESS = "no-key"
_RETRY_COUNT = "x-stainless-retry-count"  # what the openai client stamps on its own retries


@dataclass
class _Call:
    """One ``complete`` call on its way through its attempts."""

    who: str
    deadline: Deadline | None
    started: float = field(default_factory=time.monotonic)
    attempts: int = 0  # requests sent
    retries: int = 0  # of them, retries after a failure
    adapted: int = 0  # of them, sent again without a parameter the model refused
    notes: list[str] = field(default_factory=list)

    def seconds(self) -> float:
        return time.monotonic() - self.started

    def left(self) -> str:
        return "" if self.deadline is None else f", {max(self.deadline.left(), 0):.0f} s left"


class OpenAIChatClient:
    """Chat completions through ``openai.OpenAI``; one instance per run, safe to share."""

    def __init__(
        self,
        config: LLMConfig,
        progress: Progress | None = None,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.config = config
        self.where = f"endpoint {config.base_url}, model {config.model}"
        self._progress, self._heartbeat_s = progress, heartbeat_s
        # Kept only to scrub it from error messages; never stored in a record.
        self._key = os.environ.get(config.api_key_env, "")
        if not self._key and config.base_url.rstrip("/") == OPENAI_BASE_URL:
            raise LLMFatalError(
                f"no API key: ${config.api_key_env} is not set",
                self.where,
                f"export {config.api_key_env}=sk-... (or set api_key_env to the variable that "
                "holds it), or point base_url at a local server",
            )
        self._client = openai.OpenAI(
            api_key=self._key or _KEYLESS,
            base_url=config.base_url,
            timeout=config.timeout_s,
            max_retries=0,  # ours, in `_attempt`
        )
        self._shape = RequestShape(config)
        self._replies = ReplyReader(config, self.where)
        self._answered = False  # whether the endpoint has answered any request, even with an error

    def complete(
        self,
        messages: list[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        deadline: Deadline | None = None,
        role: Role | None = None,
    ) -> Reply:
        """One chat completion; ``LLMCallFailed`` when it failed after its retries (
        ``LLMDeadlineReached`` when ``deadline`` left no time), ``LLMFatalError`` when no call
        can succeed."""
        call = _Call(role or "model", deadline)
        try:
            while True:
                reply = self._attempt(call, self._shape.params(messages, temperature, max_tokens))
                if reply is not None:
                    return reply
        except LLMCallFailed as err:
            self._say(scrub(f"{call.who}: the call failed: {err}"))
            raise

    def _attempt(self, call: _Call, params: dict[str, Any]) -> Reply | None:
        """Send the request once: the reply, or None once it is time to send it again."""
        timeout, cut = self._timeout(call)
        headers = None  # the error reply's, for its retry-after
        try:
            body = self._send(call, params, timeout)
            return self._replies.read(
                body, params, seconds=call.seconds(), attempts=call.attempts, notes=call.notes
            )
        except openai.APIStatusError as err:
            self._answered = True
            note = self._shape.adapt(err, params)
            if note:
                log.warning("%s (%s)", note, self.where)
                call.notes.append(note)
                call.adapted += 1
                return None
            failure, headers = status_failure(err, self._context(call)), err.response.headers
            # `from None`: the chained openai error quotes the server, which may echo the key.
            if isinstance(failure, LLMFatalError) or not retryable(err.status_code, headers):
                raise failure from None
            said = redact(error_message(err), self._key)[:160]
            why = f"the endpoint answered {err.status_code} ({said})"
        except openai.APITimeoutError as err:
            if cut:
                raise self._out_of_time(call) from None
            failure = connection_failure(err, self._context(call), reached=True)
            why = f"no reply within {timeout:g} s"
        except openai.APIConnectionError as err:
            # Fatal, once retried, if the endpoint has never answered: a wrong address.
            failure = connection_failure(err, self._context(call), reached=self._answered)
            why = f"cannot connect ({redact(str(err.__cause__ or err), self._key)})"
        except BadReply as err:
            failure = malformed_failure(str(err), self._context(call))
            why = f"the reply is not a chat completion ({err})"
        if call.retries >= self.config.max_retries:
            raise failure from None
        self._wait(call, why, wait_before_retry(call.retries, headers))
        return None

    def _timeout(self, call: _Call) -> tuple[float, bool]:
        """This request's timeout, and whether the deadline cut it below ``timeout_s``."""
        if call.deadline is None:
            return self.config.timeout_s, False
        left = call.deadline.left()
        if left <= 0:
            raise self._out_of_time(call)
        return min(self.config.timeout_s, left), left < self.config.timeout_s

    def _send(self, call: _Call, params: dict[str, Any], timeout: float) -> str:
        call.attempts += 1
        planned = 1 + self.config.max_retries + call.adapted
        self._say(
            f"{call.who}: asking {self.config.model} at {self.config.base_url} "
            f"(attempt {call.attempts} of {planned}{call.left()})"
        )
        beat = Heartbeat(
            self._progress,
            lambda waited: (
                f"{call.who}: still waiting on the endpoint: {waited:.0f} s{call.left()}"
            ),
            self._heartbeat_s,
        )
        with beat:
            # Raw: to parse the body ourselves; the client hands back a str or a half-built
            # model for a 200 that is not a chat completion.
            raw = self._client.chat.completions.with_raw_response.create(
                **params, timeout=timeout, extra_headers={_RETRY_COUNT: str(call.retries)}
            )
        self._answered = True
        return raw.http_response.text

    def _wait(self, call: _Call, why: str, wait: float) -> None:
        """Sleep before the next attempt, unless that would pass the deadline."""
        if call.deadline is not None and wait >= (left := call.deadline.left()):
            raise self._out_of_time(
                call,
                f"{call.deadline.what} leaves {max(left, 0):.1f} s, too little to retry the "
                f"{call.who}'s call after {count(call.attempts)} ({why}; the retry would wait "
                f"{wait:.1f} s)",
            )
        self._say(f"{call.who}: {why}; retrying in {wait:.2g} s")
        log.info("%s: %s; retrying in %.1f s (%s)", call.who, why, wait, self.where)
        time.sleep(wait)
        call.retries += 1

    def _out_of_time(self, call: _Call, what: str = "") -> LLMDeadlineReached:
        """The failure of a call the deadline ended (``what``: why, when it is not simply that
        the time ran out)."""
        assert call.deadline is not None
        if not what:
            when = "during" if call.attempts else "before"
            spent = f", after {count(call.attempts)} in {call.seconds():.1f} s"
            what = f"{call.deadline.what} ran out {when} the {call.who}'s call"
            what += spent if call.attempts else ""
        return LLMDeadlineReached(
            what,
            self.where,
            "raise --max-time (search.max_seconds) for a longer search",
            attempts=call.attempts,
            seconds=call.seconds(),
        )

    def _say(self, line: str) -> None:
        if self._progress is not None:
            self._progress(line)

    def _context(self, call: _Call) -> CallContext:
        return CallContext(self.config, self.where, self._key, call.attempts, call.seconds())
