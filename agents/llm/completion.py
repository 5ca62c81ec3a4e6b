"""Reading a chat completion's body: leniently, since compatible servers add and omit fields,
and never trusting that a 200 holds one (the ``openai`` client would hand back a str or a
half-built model)."""

from __future__ import annotations

import json

from pydantic import BaseModel, ValidationError


class BadReply(Exception):
    """A 200 whose body is not a usable chat completion."""


class Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


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
