"""The request an OpenAI-compatible client sends, and how it changes for good when the model
refuses a parameter: a 400 that names ``temperature`` (reasoning models) drops it, one that
names ``max_tokens`` (where ``max_completion_tokens`` is wanted) switches to the other name.
Every later call of the client is then sent as the model takes it."""

from __future__ import annotations

from typing import Any

import openai

from agents.llm.client import LLMConfig, Message
from agents.llm.failures import TOKEN_PARAMS, refuses


class RequestShape:
    """The parameters a client sends; one per client, changed by ``adapt`` for later calls."""

    def __init__(self, config: LLMConfig) -> None:
        self.config = config
        self.send_temperature = True
        self.token_param = "max_tokens"  # what every compatible server takes; switched on a 400
        self.token_param_switched = False

    def params(
        self, messages: list[Message], temperature: float | None, max_tokens: int | None
    ) -> dict[str, Any]:
        """The request's parameters as the model takes them, as far as it has told us."""
        params: dict[str, Any] = {
            "model": self.config.model,
            "messages": [message.model_dump() for message in messages],
        }
        if temperature is not None and self.send_temperature:
            params["temperature"] = temperature
        params[self.token_param] = max_tokens or self.config.max_output_tokens
        if self.config.reasoning_effort is not None:
            params["reasoning_effort"] = self.config.reasoning_effort
        return params

    def adapt(self, err: openai.APIStatusError, params: dict[str, Any]) -> str | None:
        """Change the request shape for good if the 400 says a parameter is not taken: a note
        saying what changed, or None when it says no such thing."""
        if "temperature" in params and refuses(err, "temperature"):
            self.send_temperature = False
            note = f"{self.config.model} refuses `temperature`: sent without it from now on"
        elif not self.token_param_switched and refuses(err, self.token_param):
            old, self.token_param = self.token_param, _other_token_param(self.token_param)
            self.token_param_switched = True
            note = f"{self.config.model} refuses `{old}`: sent `{self.token_param}` from now on"
        else:
            return None
        return note


def output_limit(params: dict[str, Any]) -> int:
    """The output token limit ``params`` asked for, under whichever name it was sent."""
    return next(params[name] for name in TOKEN_PARAMS if name in params)


def _other_token_param(name: str) -> str:
    return TOKEN_PARAMS[1] if name == TOKEN_PARAMS[0] else TOKEN_PARAMS[0]
