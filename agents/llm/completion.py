"""Reading a chat completion's body into a ``Reply``: leniently, since compatible servers add
and omit fields, and never trusting that a 200 holds one (the ``openai`` client would hand back
a str or a half-built model)."""

from __future__ import annotations

import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from agents.llm.client import LLMConfig, Reply, usage_upper_bound
from agents.llm.request import output_limit

log = logging.getLogger(__name__)


class BadReply(Exception):
    """A 200 whose body is not a usable chat completion."""


class PromptTokensDetails(BaseModel):
    """``usage.prompt_tokens_details`` (openai's ``PromptTokensDetails``): OpenAI sends it;
    vLLM only with ``--enable-prompt-tokens-details``; Ollama and llama.cpp's server not."""

    cached_tokens: int | None = None


class Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: PromptTokensDetails | None = None


class ChoiceMessage(BaseModel):
    content: str | None = None
    refusal: str | None = None


class Choice(BaseModel):
    message: ChoiceMessage
    finish_reason: str | None = None


class Completion(BaseModel):
    """The part of a chat completion we read; lenient, since compatible servers add and omit."""

    model: str | None = None
    choices: list[Choice] = []
    usage: Usage | None = None


def parse_completion(body: str) -> Completion:
    try:
        data = json.loads(body)
    except ValueError:
        raise BadReply(f"the body is not JSON ({len(body)} chars: {body[:80]!r})") from None
    if not isinstance(data, dict):
        raise BadReply(f"the body is JSON {type(data).__name__}, not an object")
    try:
        completion = Completion.model_validate(data)
    except ValidationError as err:
        raise BadReply(f"not a chat completion: {err.errors()[0]['msg']}") from None
    if not completion.choices:
        error = data.get("error")
        raise BadReply(f"an error in a 200 reply: {str(error)[:200]}" if error else "no choices")
    return completion


class ReplyReader:
    """A completion's body read into a ``Reply``, with its cost. A server that sends no token
    usage is counted at an upper bound, so that the spend caps still hold (``client.py``); that
    is logged once per client."""

    def __init__(self, config: LLMConfig, where: str) -> None:
        self.config, self.where = config, where
        self._warned_usage = False

    def read(
        self, body: str, params: dict[str, Any], *, seconds: float, attempts: int, notes: list[str]
    ) -> Reply:
        """The reply in ``body`` to the request sent with ``params``; ``notes`` (what happened
        on the way) gains what the reply lacks. ``BadReply`` when it is no chat completion."""
        completion = parse_completion(body)
        choice = completion.choices[0]
        text = choice.message.content or ""
        model = completion.model or self.config.model
        prompt_tokens, completion_tokens = self._usage(completion, params, text, notes)
        cached_tokens = _cached(completion.usage, prompt_tokens, notes)
        tokens = (prompt_tokens, completion_tokens, cached_tokens)
        cost = self.config.cost_usd(model, *tokens)
        if cost is None and model != self.config.model:
            cost = self.config.cost_usd(self.config.model, *tokens)
        if choice.message.refusal:
            notes.append(f"the model refused: {choice.message.refusal[:300]}")
        elif not choice.message.content:
            notes.append(
                f"the reply has no text (finish_reason {choice.finish_reason}; 'length' "
                "means max_output_tokens ran out, on reasoning models often in reasoning)"
            )
        return Reply(
            text=text,
            model=model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=cached_tokens,
            cost_usd=cost,
            finish_reason=choice.finish_reason,
            seconds=seconds,
            attempts=attempts,
            notes=notes,
        )

    def _usage(
        self, completion: Completion, params: dict[str, Any], text: str, notes: list[str]
    ) -> tuple[int, int]:
        """The reply's prompt and completion tokens: as the server counted them, or at most."""
        usage = completion.usage or Usage()
        if usage.prompt_tokens is not None and usage.completion_tokens is not None:
            return usage.prompt_tokens, usage.completion_tokens
        prompt_tokens, completion_tokens = usage_upper_bound(
            params["messages"], text, output_limit(params)
        )
        notes.append(
            f"the server sent no token usage: counted as an upper bound, {prompt_tokens} "
            f"prompt tokens (one per byte) and {completion_tokens} completion tokens (the "
            "output limit)"
        )
        if not self._warned_usage:
            log.warning("%s sends no token usage: %s", self.where, notes[-1])
            self._warned_usage = True
        return prompt_tokens, completion_tokens


def _cached(usage: Usage | None, prompt_tokens: int, notes: list[str]) -> int | None:
    """The prompt tokens the server says it served from its cache; None where it does not say
    (no usage, no ``prompt_tokens_details``) or says what cannot be (more than the prompt)."""
    details = usage.prompt_tokens_details if usage else None
    cached = details.cached_tokens if details else None
    if cached is None or usage is None or usage.prompt_tokens is None:
        return None
    if not 0 <= cached <= prompt_tokens:
        notes.append(
            f"the server's cached_tokens ({cached}) is not within its {prompt_tokens} prompt "
            "tokens: shown as unknown"
        )
        return None
    return cached
