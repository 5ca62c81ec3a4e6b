"""What an OpenAI-compatible endpoint's error means: stop the run, fail this call, or drop a
parameter the model does not take. Messages say what, where and what to do, and never hold the
API key (servers echo it, masked or whole, in 401 bodies)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import openai

from agents.llm.client import LLMCallFailed, LLMConfig, LLMFatalError

TOKEN_PARAMS = ("max_tokens", "max_completion_tokens")
_UNSUPPORTED_CODES = ("unsupported_parameter", "unsupported_value")
_UNSUPPORTED = (
    "unsupported",
    "not supported",
    "does not support",
    "unrecognized",
    "unknown parameter",
    "not allowed",
    "not permitted",
)
_KEY_LIKE = re.compile(r"\b(sk|key)-[\w\-*.]{3,}|\S*\*{4,}\S*|Bearer\s+\S+", re.IGNORECASE)


@dataclass(frozen=True)
class CallContext:
    """Where a failed call went and what it cost, for the error it becomes."""

    config: LLMConfig
    where: str
    key: str
    attempts: int
    seconds: float


def status_failure(err: openai.APIStatusError, ctx: CallContext) -> LLMFatalError | LLMCallFailed:
    """The error an HTTP status becomes once the openai client has done its retries."""
    status, said = err.status_code, redact(error_message(err), ctx.key)[:300]
    fatal = _fatal(err, ctx.config, key_set=bool(ctx.key))
    if fatal is not None:
        what, fix = fatal
        return LLMFatalError(
            f"{what} (HTTP {status}: {said})",
            ctx.where,
            fix,
            attempts=ctx.attempts,
            seconds=ctx.seconds,
        )
    if status == 429:
        fix = "the endpoint is rate limiting: lower parallel calls or raise max_retries"
    elif status >= 500:
        fix = "the server failed; it may recover, later calls will try again"
    else:
        fix = "the server refused this request (a prompt too long for the model's context?)"
    return LLMCallFailed(
        f"HTTP {status} after {count(ctx.attempts)}: {said}",
        ctx.where,
        fix,
        attempts=ctx.attempts,
        seconds=ctx.seconds,
    )


def connection_failure(
    err: openai.APIConnectionError, ctx: CallContext, *, reached: bool
) -> LLMFatalError | LLMCallFailed:
    """The error a timeout or an unreachable endpoint becomes after the retries. ``reached``:
    whether the endpoint has answered any request of this run; if not, an endpoint that
    cannot be reached (refused, no such host) is a wrong address, and no later call would fare
    better."""
    if isinstance(err, openai.APITimeoutError):
        what = f"no reply within timeout_s={ctx.config.timeout_s:g} s, {count(ctx.attempts)}"
        fix = "raise timeout_s (reasoning models can take minutes) or check the server's load"
        return LLMCallFailed(what, ctx.where, fix, attempts=ctx.attempts, seconds=ctx.seconds)
    cause = redact(str(err.__cause__ or err), ctx.key)
    if not reached:
        return LLMFatalError(
            f"cannot reach the LLM endpoint {ctx.config.base_url}: {cause} "
            f"({count(ctx.attempts)} in {ctx.seconds:.1f} s)",
            ctx.where,
            "check base_url ($OPENAI_BASE_URL or [tool.kernelpilot.llm] base_url) and that the "
            "server is running and listening there",
            attempts=ctx.attempts,
            seconds=ctx.seconds,
        )
    what = f"cannot reach the endpoint after {count(ctx.attempts)}: {cause}"
    fix = "check that the server is still running; later calls will try again"
    return LLMCallFailed(what, ctx.where, fix, attempts=ctx.attempts, seconds=ctx.seconds)


def malformed_failure(problem: str, ctx: CallContext) -> LLMCallFailed:
    """The error a 200 without a usable chat completion becomes after the retries."""
    return LLMCallFailed(
        f"malformed reply after {count(ctx.attempts)}: {problem}",
        ctx.where,
        "the server answered 200 without a usable chat completion; check that base_url is an "
        "OpenAI-compatible /v1 endpoint",
        attempts=ctx.attempts,
        seconds=ctx.seconds,
    )


def refuses(err: openai.APIStatusError, param: str) -> bool:
    """Whether a 400 says ``param`` is not taken (OpenAI sets ``param``; others only say so)."""
    if err.status_code not in (400, 422):
        return False
    message = error_message(err).lower()
    named = err.param == param or re.search(rf"\b{param}\b", message) is not None
    unsupported = err.code in _UNSUPPORTED_CODES or any(p in message for p in _UNSUPPORTED)
    return named and unsupported


def count(attempts: int) -> str:
    return "1 attempt" if attempts == 1 else f"{attempts} attempts"


def error_message(err: openai.APIStatusError) -> str:
    """The server's own words (openai keeps the inner ``error`` object as ``body``)."""
    body = err.body
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        return str(body["message"])
    return str(body) if body else err.message


def redact(text: str, key: str) -> str:
    """``text`` without the key or anything that looks like one."""
    if key:
        text = text.replace(key, "***")
    return _KEY_LIKE.sub("***", text)


def _fatal(
    err: openai.APIStatusError, config: LLMConfig, *, key_set: bool
) -> tuple[str, str] | None:
    """(what, fix) when no later call can succeed; None when only this call failed."""
    status = err.status_code
    kind = f"{err.code} {err.body.get('type', '') if isinstance(err.body, dict) else ''}"
    if status in (401, 403):
        unset = "" if key_set else f" (${config.api_key_env} is not set)"
        return (
            f"the endpoint refused the API key{unset}",
            f"put a valid key for {config.base_url} in ${config.api_key_env}, or set "
            "api_key_env to the variable that holds it",
        )
    if status == 404:
        return (
            f"model {config.model!r} or the chat-completions route was not found",
            "check the model name (--model; `ollama list`, vLLM's /v1/models) and that "
            "base_url ends in /v1",
        )
    if status == 429 and "insufficient_quota" in kind:
        return ("the account has no quota left", "add credit or use another key or endpoint")
    if status not in (400, 422):
        return None
    if err.param == "reasoning_effort" or "reasoning_effort" in error_message(err):
        return (
            "the model does not take reasoning_effort",
            "remove reasoning_effort from the config",
        )
    if err.param in TOKEN_PARAMS:
        return ("the model refuses the output-token limit", "lower max_output_tokens")
    if err.param == "model" or any(code in kind for code in _UNSUPPORTED_CODES):
        return ("the model refuses the request's shape", "check the model name and its parameters")
    return None
