"""The run's budgets: attempts, wall time, tokens and cost; whichever ends first ends it.

Spend caps. An LLM search costs money, and a pull request decides how many targets there are
and how long their prompts get, so spend is capped by default (``SearchConfig``): per target and
per run (one run is one pull request's measure job, or one command). A call's cost is what its
``usage`` says, priced by ``LLMConfig.prices``. A model without a price has an unknown cost, so
a dollar cap cannot see it: its tokens count against a token cap instead (``max_unpriced_tokens``,
the same per run). The caps are checked before every call of the model, so a search passes a cap
by one call at most and stops between steps, with the trajectory saved. The wall time is a
deadline for each call as it runs (``Budget.deadline``): a call cut short by it ends the search.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from pydantic import BaseModel, Field

from agents.llm.client import Deadline
from agents.search.tree import LLMCall


class Spend(BaseModel):
    """What some calls of the model cost."""

    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_tokens: int = Field(default=0, description="Tokens of calls whose cost is unknown.")
    priced: bool = Field(default=False, description="At least one call had a known cost.")

    @classmethod
    def of(cls, calls: Iterable[LLMCall]) -> Spend:
        spend = cls()
        for call in calls:
            tokens = call.prompt_tokens + call.completion_tokens
            spend.tokens += tokens
            if call.cost_usd is None:
                spend.unpriced_tokens += tokens
            else:
                spend.cost_usd += call.cost_usd
                spend.priced = True
        return spend


class Budget(BaseModel):
    """Limits and what has been spent; travels with the run (no global counters)."""

    attempts: int = Field(default=30, description="Candidates to evaluate, at most.")
    max_seconds: float | None = Field(default=None, description="Wall time, at most.")
    max_tokens: int | None = Field(default=None, description="Prompt + completion tokens.")
    max_cost_usd: float | None = Field(default=None, description="Model cost, at most.")
    max_unpriced_tokens: int | None = Field(
        default=None, description="Tokens of calls to a model without a price, at most."
    )
    run_max_cost_usd: float | None = Field(
        default=None, description="The run's cost cap, over all its targets."
    )
    run_max_unpriced_tokens: int | None = Field(
        default=None, description="The run's cap on tokens without a price, over all targets."
    )
    run_spent_cost_usd: float = Field(
        default=0.0, description="Spent by the run's earlier targets when this one started."
    )
    run_spent_unpriced_tokens: int = Field(
        default=0, description="Unpriced tokens of the run's earlier targets."
    )
    spent_attempts: int = 0
    spent_seconds: float = 0.0
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0
    spent_unpriced_tokens: int = 0
    started: float = Field(default_factory=time.monotonic, exclude=True)

    def charge(self, spend: Spend | None = None, attempt: bool = False) -> None:
        spend = spend or Spend()
        self.spent_tokens += spend.tokens
        self.spent_cost_usd += spend.cost_usd
        self.spent_unpriced_tokens += spend.unpriced_tokens
        self.spent_attempts += int(attempt)

    def tick(self, base_seconds: float = 0.0) -> None:
        """Bring the wall time up to date (``base_seconds``: spent before a resume)."""
        self.spent_seconds = base_seconds + time.monotonic() - self.started

    def exhausted(self) -> str:
        """Which budget ran out, or "" while none has."""
        if self.spent_attempts >= self.attempts:
            return f"{self.attempts} attempts"
        if self.max_seconds is not None and self.spent_seconds >= self.max_seconds:
            return self.time_cap()
        return self.spend_cap()

    def time_cap(self) -> str:
        """The wall-time budget, as ``exhausted`` names it when it runs out."""
        return f"{self.max_seconds or 0:.0f} s of wall time"

    def deadline(self, base_seconds: float = 0.0) -> Deadline | None:
        """When the wall time runs out, for the calls of the model to end by (``base_seconds``:
        spent before a resume, as for ``tick``); None without a time budget."""
        if self.max_seconds is None:
            return None
        at = self.started + self.max_seconds - base_seconds
        return Deadline(at=at, what=f"the search's --max-time of {self.max_seconds:g} s")

    def spend_cap(self, pending: Spend | None = None) -> str:
        """Which spend cap is reached with ``pending`` (calls of a step not yet charged) on
        top of what was spent, or ""."""
        pending = pending or Spend()
        tokens = self.spent_tokens + pending.tokens
        cost = self.spent_cost_usd + pending.cost_usd
        unpriced = self.spent_unpriced_tokens + pending.unpriced_tokens
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return f"{self.max_tokens} tokens"
        if self.max_cost_usd is not None and cost >= self.max_cost_usd:
            return f"the cost cap of ${self.max_cost_usd:.2f} per target (spent ${cost:.2f})"
        if self.max_unpriced_tokens is not None and unpriced >= self.max_unpriced_tokens:
            return (
                f"the cap of {self.max_unpriced_tokens:,} tokens per target for a model without "
                f"a price (spent {unpriced:,})"
            )
        run_cost = self.run_spent_cost_usd + cost
        if self.run_max_cost_usd is not None and run_cost >= self.run_max_cost_usd:
            return f"the run's cost cap of ${self.run_max_cost_usd:.2f} (spent ${run_cost:.2f})"
        run_unpriced = self.run_spent_unpriced_tokens + unpriced
        if (
            self.run_max_unpriced_tokens is not None
            and run_unpriced >= self.run_max_unpriced_tokens
        ):
            return (
                f"the run's cap of {self.run_max_unpriced_tokens:,} tokens for a model without a "
                f"price (spent {run_unpriced:,})"
            )
        return ""


class RunSpend(BaseModel):
    """The spend caps of a whole run (a pull request, a command) and what its targets spent.

    One per run, handed to every target's search: ``start`` gives a target's budget the run's
    caps and what the earlier targets spent; ``finish`` adds what the target spent.
    """

    max_cost_usd: float | None = None
    max_unpriced_tokens: int | None = None
    spent_cost_usd: float = 0.0
    spent_unpriced_tokens: int = 0

    def start(self, budget: Budget) -> Spend:
        """Put the run's caps on ``budget``; returns its spend so far (a resumed search's)."""
        budget.run_max_cost_usd = self.max_cost_usd
        budget.run_max_unpriced_tokens = self.max_unpriced_tokens
        budget.run_spent_cost_usd = self.spent_cost_usd
        budget.run_spent_unpriced_tokens = self.spent_unpriced_tokens
        return Spend(cost_usd=budget.spent_cost_usd, unpriced_tokens=budget.spent_unpriced_tokens)

    def finish(self, budget: Budget, before: Spend) -> None:
        """Add what ``budget`` spent since ``start`` returned ``before``."""
        self.spent_cost_usd += budget.spent_cost_usd - before.cost_usd
        self.spent_unpriced_tokens += budget.spent_unpriced_tokens - before.unpriced_tokens
