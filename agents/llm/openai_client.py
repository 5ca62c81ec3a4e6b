"""``LLMClient`` for any OpenAI-compatible chat-completions endpoint, on the ``openai`` package.

Retries are split in two. The openai client retries what HTTP tells it is transient: 408, 409,
429, every 5xx, connection errors and timeouts, ``max_retries`` times, with exponential backoff
(0.5 s doubling to 8 s, minus up to 25% jitter) or the server's ``retry-after``/``retry-after-ms``
when that is at most two minutes; a longer ``retry-after`` is not retried at all
(openai/_base_client.py: ``_should_retry``, ``_calculate_retry_timeout``). It cannot see a 200
whose body is not a chat completion (no choices, not JSON); only those are retried here, on the
same backoff curve. On top of that, a 400 that names a parameter the model does not take
(``temperature`` on reasoning models, ``max_tokens`` where ``max_completion_tokens`` is wanted)
is asked again once without it, and remembered for every later call.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from typing import Any

import openai
from pydantic import BaseModel, ValidationError

from agents.llm.client import (
    OPENAI_BASE_URL,
    LLMCallFailed,
    LLMConfig,
    LLMFatalError,
    Message,
    Reply,
    usage_upper_bound,
)
from agents.llm.failures import (
    TOKEN_PARAMS,
    CallContext,
    connection_failure,
    count,
    refuses,
    requests_made,
    status_failure,
)

log = logging.getLogger(__name__)

# Local servers (vLLM, Ollama, llama.cpp) take any key, but the openai client refuses an empty one.
_KEYLESS = "no-key"
_FIRST_DELAY_S = 0.5  # the openai client's INITIAL_RETRY_DELAY and MAX_RETRY_DELAY
_MAX_DELAY_S = 8.0


class _BadReply(Exception):
    """A 200 whose body is not a usable chat completion."""


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _ChoiceMessage(BaseModel):
    content: str | None = None
    refusal: str | None = None


class _Choice(BaseModel):
    message: _ChoiceMessage
    finish_reason: str | None = None


class _Completion(BaseModel):
    """The part of a chat completion we read; lenient, since compatible servers add and omit."""

    model: str | None = None
    choices: list[_Choice] = []
    usage: _Usage | None = None


class OpenAIChatClient:
    """Chat completions through ``openai.OpenAI``; one instance per run, safe to share."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.where = f"endpoint {config.base_url}, model {config.model}"
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
            max_retries=config.max_retries,
        )
        self._send_temperature = True
        self._token_param = "max_tokens"  # what every compatible server takes; switched on a 400
        self._token_param_switched = False
        self._warned_usage = False

    def complete(
        self,
        messages: list[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Reply:
        """One chat completion; ``LLMCallFailed`` when it failed after its retries,
        ``LLMFatalError`` when no call can succeed."""
        started = time.monotonic()
        attempts = 0
        bad_replies = 0
        notes: list[str] = []
        while True:
            params = self._params(messages, temperature, max_tokens)
            try:
                # Raw: for `retries_taken`, and to parse the body ourselves; the client hands back
                # a str or a half-built model for a 200 that is not a chat completion.
                raw = self._client.chat.completions.with_raw_response.create(**params)
            except openai.APIStatusError as err:
                attempts += requests_made(err)
                note = self._adapt(err, params)
                if note:
                    notes.append(note)
                    continue
                # `from None`: the chained openai error quotes the server, which may echo the key.
                raise status_failure(err, self._context(attempts, started)) from None
            except openai.APIConnectionError as err:  # APITimeoutError is one too
                attempts += requests_made(err)
                raise connection_failure(err, self._context(attempts, started)) from None
            attempts += raw.retries_taken + 1
            try:
                return self._reply(raw.http_response.text, attempts, started, notes, params)
            except _BadReply as err:
                if bad_replies >= self.config.max_retries:
                    raise LLMCallFailed(
                        f"malformed reply after {count(attempts)}: {err}",
                        self.where,
                        "the server answered 200 without a usable chat completion; check that "
                        "base_url is an OpenAI-compatible /v1 endpoint",
                        attempts=attempts,
                        seconds=time.monotonic() - started,
                    ) from None
                log.info("malformed reply from %s (%s); asking again", self.where, err)
                time.sleep(_backoff(bad_replies))
                bad_replies += 1

    def _params(
        self, messages: list[Message], temperature: float | None, max_tokens: int | None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.config.model,
            "messages": [message.model_dump() for message in messages],
        }
        if temperature is not None and self._send_temperature:
            params["temperature"] = temperature
        params[self._token_param] = max_tokens or self.config.max_output_tokens
        if self.config.reasoning_effort is not None:
            params["reasoning_effort"] = self.config.reasoning_effort
        return params

    def _adapt(self, err: openai.APIStatusError, params: dict[str, Any]) -> str | None:
        """Change the request shape for good if the 400 says a parameter is not taken."""
        if "temperature" in params and refuses(err, "temperature"):
            self._send_temperature = False
            note = f"{self.config.model} refuses `temperature`: sent without it from now on"
        elif not self._token_param_switched and refuses(err, self._token_param):
            old, self._token_param = self._token_param, _other_token_param(self._token_param)
            self._token_param_switched = True
            note = f"{self.config.model} refuses `{old}`: sent `{self._token_param}` from now on"
        else:
            return None
        log.warning("%s (%s)", note, self.where)
        return note

    def _context(self, attempts: int, started: float) -> CallContext:
        return CallContext(self.config, self.where, self._key, attempts, time.monotonic() - started)

    def _reply(
        self, body: str, attempts: int, started: float, notes: list[str], params: dict[str, Any]
    ) -> Reply:
        completion = _parse_completion(body)
        choice = completion.choices[0]
        usage = completion.usage or _Usage()
        prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        model = completion.model or self.config.model
        if prompt_tokens is None or completion_tokens is None:
            # Counted as an upper bound, so that the spend caps still hold (client.py).
            text = choice.message.content or ""
            prompt_tokens, completion_tokens = usage_upper_bound(
                params["messages"], text, params[self._token_param]
            )
            notes.append(
                f"the server sent no token usage: counted as an upper bound, {prompt_tokens} "
                f"prompt tokens (one per byte) and {completion_tokens} completion tokens (the "
                "output limit)"
            )
            if not self._warned_usage:
                log.warning("%s sends no token usage: %s", self.where, notes[-1])
                self._warned_usage = True
        cost = self.config.cost_usd(model, prompt_tokens, completion_tokens)
        if cost is None and model != self.config.model:
            cost = self.config.cost_usd(self.config.model, prompt_tokens, completion_tokens)
        if choice.message.refusal:
            notes.append(f"the model refused: {choice.message.refusal[:300]}")
        elif not choice.message.content:
            notes.append(
                f"the reply has no text (finish_reason {choice.finish_reason}; 'length' "
                "means max_output_tokens ran out, on reasoning models often in reasoning)"
            )
        return Reply(
            text=choice.message.content or "",
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cost_usd=cost,
            finish_reason=choice.finish_reason,
            seconds=time.monotonic() - started,
            attempts=attempts,
            notes=notes,
        )


def _parse_completion(body: str) -> _Completion:
    try:
        data = json.loads(body)
    except ValueError:
        raise _BadReply(f"the body is not JSON ({len(body)} chars: {body[:80]!r})") from None
    if not isinstance(data, dict):
        raise _BadReply(f"the body is JSON {type(data).__name__}, not an object")
    try:
        completion = _Completion.model_validate(data)
    except ValidationError as err:
        raise _BadReply(f"not a chat completion: {err.errors()[0]['msg']}") from None
    if not completion.choices:
        error = data.get("error")
        raise _BadReply(f"an error in a 200 reply: {str(error)[:200]}" if error else "no choices")
    return completion


def _other_token_param(name: str) -> str:
    return TOKEN_PARAMS[1] if name == TOKEN_PARAMS[0] else TOKEN_PARAMS[0]


def _backoff(retries_done: int) -> float:
    return min(_FIRST_DELAY_S * 2**retries_done, _MAX_DELAY_S) * (1 - 0.25 * random.random())
