"""What a call of the model cost: list prices per model, and a call's usage priced by them.

Providers cache the start of a prompt that an earlier request began with (OpenAI for prompts
of 1,024 tokens or more, automatically; vLLM with prefix caching; Ollama keeps its KV cache)
and OpenAI bills the cached tokens at a discount. The server says how many it served from the
cache in ``usage.prompt_tokens_details.cached_tokens``; where it does not, or where the model's
price has no cached rate, every prompt token is priced at the full input rate, so the cost is
an upper bound, never an understatement.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field


class ModelPrice(BaseModel):
    """List price of one model in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_million: float = Field(ge=0, description="USD per 1M prompt tokens.")
    output_per_million: float = Field(ge=0, description="USD per 1M completion tokens.")
    cached_input_per_million: float | None = Field(
        default=None,
        ge=0,
        description="USD per 1M prompt tokens the provider served from its prompt cache; "
        "None: they cost input_per_million (the cost is then an upper bound).",
    )

    def cost_usd(
        self, prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None
    ) -> float:
        """USD for one call; ``cached_tokens`` (of the prompt's, None: unknown) at the cached
        rate where there is one."""
        cached = 0
        if cached_tokens is not None and self.cached_input_per_million is not None:
            cached = min(cached_tokens, prompt_tokens)
        cached_rate = self.cached_input_per_million or 0.0
        return (
            (prompt_tokens - cached) * self.input_per_million
            + cached * cached_rate
            + completion_tokens * self.output_per_million
        ) / 1e6


# OpenAI list prices (input, cached input, output) as OpenAI's pricing page and third-party
# summaries gave them in 2025-2026 (no network to check them from here): a starting point, to
# be overridden in [tool.kernelpilot.llm.prices].
DEFAULT_PRICES: dict[str, ModelPrice] = {
    name: ModelPrice(input_per_million=inp, cached_input_per_million=cached, output_per_million=out)
    for name, inp, cached, out in (
        ("gpt-4o", 2.50, 1.25, 10.00),
        ("gpt-4o-mini", 0.15, 0.075, 0.60),
        ("gpt-4.1", 2.00, 0.50, 8.00),
        ("gpt-4.1-mini", 0.40, 0.10, 1.60),
        ("gpt-5", 1.25, 0.125, 10.00),
        ("gpt-5-mini", 0.25, 0.025, 2.00),
        ("o3", 2.00, 0.50, 8.00),
        ("o4-mini", 1.10, 0.275, 4.40),
    )
}
SNAPSHOT = re.compile(r"-(\d{4}-\d{2}-\d{2}|\d{8})$")  # gpt-4o-2024-08-06 is priced as gpt-4o


def price_for(prices: dict[str, ModelPrice], model: str) -> ModelPrice | None:
    """The price of ``model``, or of the model it is a dated snapshot of; None if unknown."""
    if model in prices:
        return prices[model]
    return prices.get(SNAPSHOT.sub("", model))
