"""How a target's search tree grows and what it may spend ([tool.kernelpilot.search]; the
budgets also from the command line), and the ``Budget`` and ``RunSpend`` records made from it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agents.search.budget import RunSpend

# Default spend caps. A step asks the planner and the coder (about 20-30k prompt tokens and a
# few thousand completion tokens each): at gpt-4.1's list price a full 30-attempt search costs
# about $4-8, so $5 per target lets most of one run, and $20 per run bounds what a pull request
# touching many modules can spend. Unpriced tokens: about 30 attempts' worth per target.
DEFAULT_MAX_COST_USD = 5.0
DEFAULT_MAX_UNPRICED_TOKENS = 2_000_000
DEFAULT_RUN_MAX_COST_USD = 20.0
DEFAULT_RUN_MAX_UNPRICED_TOKENS = 8_000_000


class SearchConfig(BaseModel):
    """How the tree grows ([tool.kernelpilot.search]; budgets also from the command line)."""

    model_config = {"extra": "forbid"}

    strategy: Literal["greedy", "epsilon-greedy"] = "epsilon-greedy"
    epsilon: float = Field(default=0.3, ge=0, le=1, description="Chance of a random leaf.")
    width: int | None = Field(
        default=None,
        ge=1,
        description="Candidates per step, built in parallel and checked and timed one per GPU; "
        "default: one per GPU the evaluation uses (eval.gpus), 1 on cpu.",
    )
    seed_offline: bool = Field(
        default=True, description="The offline proposer's kernel is the root's first child."
    )
    root_first: int = Field(
        default=2,
        ge=0,
        description="The first children grow from the reference itself (the offline kernel "
        "counts): the model's own design before it refines the best kernel.",
    )
    root_children: int = Field(
        default=4,
        ge=1,
        description="Children the reference grows at most; then only kernels are refined.",
    )
    prune_after: int = Field(
        default=3,
        ge=1,
        description="A node with this many children, all failed, grows no more (its subtree is "
        "given up).",
    )
    attempts: int = Field(default=30, ge=1, description="Candidates per target, at most.")
    max_seconds: float | None = Field(default=None, gt=0, description="Wall time per target.")
    max_tokens: int | None = Field(default=None, gt=0, description="LLM tokens per target.")
    max_cost_usd: float | None = Field(
        default=DEFAULT_MAX_COST_USD,
        gt=0,
        description="LLM cost per target, USD (calls priced by llm.prices); `inf` lifts it.",
    )
    max_unpriced_tokens: int | None = Field(
        default=DEFAULT_MAX_UNPRICED_TOKENS,
        gt=0,
        description="LLM tokens per target of calls whose cost is unknown (a model without a "
        "price): the cap that stands in for max_cost_usd there.",
    )
    run_max_cost_usd: float | None = Field(
        default=DEFAULT_RUN_MAX_COST_USD,
        gt=0,
        description="LLM cost per run (a pull request, a command), all targets together, USD.",
    )
    run_max_unpriced_tokens: int | None = Field(
        default=DEFAULT_RUN_MAX_UNPRICED_TOKENS,
        gt=0,
        description="LLM tokens per run of calls whose cost is unknown.",
    )


def budget_limits(config: SearchConfig) -> dict:
    """The per-target limits of ``config`` as ``Budget`` fields (the run's come from
    ``RunSpend``)."""
    return {
        "attempts": config.attempts,
        "max_seconds": config.max_seconds,
        "max_tokens": config.max_tokens,
        "max_cost_usd": config.max_cost_usd,
        "max_unpriced_tokens": config.max_unpriced_tokens,
    }


def run_spend(config: SearchConfig) -> RunSpend:
    """A fresh spend record of a run under ``config``'s run caps (one per run)."""
    return RunSpend(
        max_cost_usd=config.run_max_cost_usd, max_unpriced_tokens=config.run_max_unpriced_tokens
    )
