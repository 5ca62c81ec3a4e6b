"""The run's budgets: attempts, wall time, tokens and cost; whichever ends first ends it."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field


class Budget(BaseModel):
    """Limits and what has been spent; travels with the run (no global counters)."""

    attempts: int = Field(default=30, description="Candidates to evaluate, at most.")
    max_seconds: float | None = Field(default=None, description="Wall time, at most.")
    max_tokens: int | None = Field(default=None, description="Prompt + completion tokens.")
    max_cost_usd: float | None = Field(default=None, description="Model cost, at most.")
    spent_attempts: int = 0
    spent_seconds: float = 0.0
    spent_tokens: int = 0
    spent_cost_usd: float = 0.0
    started: float = Field(default_factory=time.monotonic, exclude=True)

    def charge(self, tokens: int = 0, cost_usd: float | None = None, attempt: bool = False) -> None:
        self.spent_tokens += tokens
        self.spent_cost_usd += cost_usd or 0.0
        self.spent_attempts += int(attempt)

    def tick(self, base_seconds: float = 0.0) -> None:
        """Bring the wall time up to date (``base_seconds``: spent before a resume)."""
        self.spent_seconds = base_seconds + time.monotonic() - self.started

    def exhausted(self) -> str:
        """Which budget ran out, or "" while none has."""
        if self.spent_attempts >= self.attempts:
            return f"{self.attempts} attempts"
        if self.max_seconds is not None and self.spent_seconds >= self.max_seconds:
            return f"{self.max_seconds:.0f} s of wall time"
        if self.max_tokens is not None and self.spent_tokens >= self.max_tokens:
            return f"{self.max_tokens} tokens"
        if self.max_cost_usd is not None and self.spent_cost_usd >= self.max_cost_usd:
            return f"${self.max_cost_usd:.2f}"
        return ""
