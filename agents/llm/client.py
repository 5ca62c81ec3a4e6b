"""The small interface the rest of kernelpilot uses to talk to a language model.

Roles hold an ``LLMClient`` and call ``complete(messages, temperature=...)``; they never see
which provider answers. Two failures are kept apart: ``LLMFatalError`` stops the run (nothing
later can succeed: bad key, unknown model), ``LLMCallFailed`` is one call's failure that the
search records on its step before going on; ``LLMDeadlineReached``, one of those, says the
caller's deadline (the search's ``--max-time``) left no time for the call, and the search stops.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from agents.llm.prices import DEFAULT_PRICES, ModelPrice, price_for
from harness.errors import UserError

Role = Literal["planner", "coder", "debugger"]
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
OPENAI_BASE_URL = "https://api.openai.com/v1"
Progress = Callable[[str], None]  # one line for the terminal (the CLI stamps the time)


class Message(BaseModel):
    """One chat message sent to the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


class Reply(BaseModel):
    """What one ``complete`` call produced, with what it cost; recorded on the search step."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(description="The first choice's message content ('' when it had none).")
    model: str = Field(description="The model that answered, as the server names it.")
    prompt_tokens: int = Field(
        ge=0, description="Input tokens (an upper bound when the server sent no usage)."
    )
    completion_tokens: int = Field(ge=0, description="Output tokens, reasoning tokens included.")
    cached_tokens: int | None = Field(
        default=None,
        ge=0,
        description="Of the prompt tokens, those the provider served from its prompt cache "
        "(usage.prompt_tokens_details.cached_tokens); None: the server did not say (unknown, "
        "not 0).",
    )
    cost_usd: float | None = Field(
        description="From the price table; None when the model has no price (unknown, not 0)."
    )
    finish_reason: str | None = Field(description="'stop', 'length' (truncated), ... or None.")
    seconds: float = Field(ge=0, description="Wall time of the call, retries and backoff included.")
    attempts: int = Field(ge=1, description="HTTP requests made for this call, retries included.")
    notes: list[str] = Field(
        default_factory=list,
        description="What the report should show about this call (no usage sent, a dropped "
        "parameter).",
    )

    @model_validator(mode="after")
    def _cached_within_prompt(self) -> Reply:
        if self.cached_tokens is not None and self.cached_tokens > self.prompt_tokens:
            raise ValueError(
                f"cached_tokens {self.cached_tokens} exceeds prompt_tokens {self.prompt_tokens}"
            )
        return self


MESSAGE_OVERHEAD_TOKENS = 8  # the chat format's tokens around each message (role, separators)


def usage_upper_bound(
    messages: list[dict[str, Any]], text: str, max_tokens: int
) -> tuple[int, int]:
    """(prompt, completion) tokens at most, for a server that sent no ``usage``.

    Byte-level BPE tokenizers (tiktoken's, Llama 3's, Qwen's) and SentencePiece with byte
    fallback emit at most one token per UTF-8 byte, so the prompt's bytes (plus the chat
    format's few tokens per message) bound its tokens: about four times the real count for
    English and code. The server stops generating at the output limit (reasoning included), so
    that bounds the completion, unless the visible text alone is longer.
    """
    prompt = sum(
        len(str(message.get("content") or "").encode()) + MESSAGE_OVERHEAD_TOKENS
        for message in messages
    )
    return prompt, max(max_tokens, len(text.encode()))


@dataclass(frozen=True)
class Deadline:
    """When a call must have ended, as a ``time.monotonic()`` instant, and what set it (the
    search's wall budget: "the search's --max-time of 600 s"), for the message when it passes."""

    at: float
    what: str

    def left(self) -> float:
        """Seconds until the deadline (negative once it has passed)."""
        return self.at - time.monotonic()


class LLMClient(Protocol):
    """Anything that turns a conversation into a ``Reply``: the openai client, the scripted one.

    ``deadline``: the call ends by then, retries included (``LLMDeadlineReached`` if it cannot);
    ``role``: who asks, named in progress lines and errors.
    """

    def complete(
        self,
        messages: list[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        deadline: Deadline | None = None,
        role: Role | None = None,
    ) -> Reply: ...


class LLMFatalError(UserError):
    """The LLM endpoint can never answer this run (bad key, unknown model, a request shape the
    model refuses): the run stops at once and the CLI prints what, where and what to do."""

    def __init__(
        self, what: str, where: str = "", fix: str = "", *, attempts: int = 0, seconds: float = 0.0
    ) -> None:
        self.attempts = attempts
        self.seconds = seconds
        super().__init__(what, where, fix)


class LLMCallFailed(Exception):
    """This one call failed after its retries (429 storm, 5xx, timeout, endpoint down, malformed
    reply): the caller records it on the step and goes on within its budget."""

    def __init__(
        self, what: str, where: str = "", fix: str = "", *, attempts: int = 0, seconds: float = 0.0
    ) -> None:
        self.what = what
        self.where = where
        self.fix = fix
        self.attempts = attempts
        self.seconds = seconds
        parts = [what] + [
            f"{label}: {text}" for label, text in (("where", where), ("fix", fix)) if text
        ]
        super().__init__("; ".join(parts))


class LLMDeadlineReached(LLMCallFailed):
    """The caller's deadline passed during the call, or left too little time to retry it: the
    call failed and the caller (the search) is out of time."""


class RoleTemperatures(BaseModel):
    """Sampling temperature per role (None: send none, the server's default applies)."""

    model_config = ConfigDict(extra="forbid")

    planner: float | None = Field(default=0.8, ge=0, le=2, description="Diverse plans.")
    coder: float | None = Field(default=0.1, ge=0, le=2, description="Faithful implementation.")
    debugger: float | None = Field(default=0.1, ge=0, le=2, description="Careful repairs.")


def _default_base_url() -> str:
    return os.environ.get("OPENAI_BASE_URL") or OPENAI_BASE_URL


class LLMConfig(BaseModel):
    """How kernelpilot reaches its language model (``[tool.kernelpilot.llm]``, CLI flags)."""

    model_config = ConfigDict(extra="forbid")

    provider: Literal["openai", "scripted"] = Field(
        default="openai",
        description="'openai': any OpenAI-compatible chat-completions endpoint (OpenAI, Azure, "
        "vLLM, Ollama, llama.cpp server). 'scripted': replay replies from `script`, no network.",
    )
    model: str = Field(default="gpt-4.1", description="Model name as the endpoint knows it.")
    base_url: str = Field(
        default_factory=_default_base_url,
        description="Endpoint root ending in /v1 (Ollama: http://localhost:11434/v1); default "
        "$OPENAI_BASE_URL, else OpenAI's.",
    )
    api_key_env: str = Field(
        default="OPENAI_API_KEY",
        description="Name of the environment variable holding the API key. The key itself is "
        "never stored in the config or in any record.",
    )
    timeout_s: float = Field(
        default=300.0,
        gt=0,
        description="Limit per HTTP request (reasoning models take minutes); never past the "
        "search's wall budget (search.max_seconds, --max-time).",
    )
    max_retries: int = Field(
        default=3,
        ge=0,
        description="Retries per call, on the openai client's rules (408/409/429/5xx, connection "
        "errors, timeouts) and on a 200 reply with no choices or a body that does not parse; "
        "none once the search's wall budget is spent.",
    )
    temperatures: RoleTemperatures = Field(
        default_factory=RoleTemperatures, description="Sampling temperature per role."
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None, description="Sent only when set, for reasoning models."
    )
    max_output_tokens: int = Field(
        default=8192,
        gt=0,
        description="Output limit per call; reasoning models count their reasoning in it.",
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=lambda: dict(DEFAULT_PRICES),
        description="Model -> USD per 1M input, cached input (optional) and output tokens; a "
        "table given in the config replaces the defaults. A model not listed has unknown cost "
        "(shown as unknown, never 0); list a local model at 0 to show it free.",
    )
    script: Path | None = Field(
        default=None,
        description="Reply script for the 'scripted' provider (agents/llm/scripted.py).",
    )

    @model_validator(mode="after")
    def _script_for_scripted(self) -> LLMConfig:
        if self.provider == "scripted" and self.script is None:
            raise ValueError("provider 'scripted' needs `script`: the path of a reply script")
        return self

    def temperature_for(self, role: Role) -> float | None:
        """The temperature a role samples at."""
        temperature: float | None = getattr(self.temperatures, role)
        return temperature

    def price_for(self, model: str) -> ModelPrice | None:
        """The price of ``model``, or of the model it is a dated snapshot of; None if unknown."""
        return price_for(self.prices, model)

    def cost_usd(
        self,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int | None = None,
    ) -> float | None:
        """USD for one call, or None when the model has no price; ``cached_tokens`` (None:
        the server did not say) at the price's cached-input rate where it has one."""
        price = self.price_for(model)
        if price is None:
            return None
        return price.cost_usd(prompt_tokens, completion_tokens, cached_tokens)
