"""The trajectory: the whole search of one target (every node's plan, code, verdict, tokens,
cached tokens, cost and seeds), saved as JSON after every step.

Reports render from it, ``--resume`` continues it without redoing what it holds, and a saved
one replays to the same tree (tests). What each attempt cost in calls of the model is read
from it (``Trajectory.spend``): prompt, cached and completion tokens and cost per node, and
their totals; a count a server did not send, or a call without a price, makes the sum unknown
(None), never a smaller number.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agents.search.budget import Budget
from agents.search.tree import LLMCall, Node, NodeKind, Tree
from harness.records import Problem

VERSION = 1
Number = TypeVar("Number", int, float)


class CallSpend(BaseModel):
    """What some calls of the model cost. ``cached_tokens`` and ``cost_usd`` are None (unknown)
    when a call that used tokens lacks them: a server that does not report its cache, a model
    without a price. Calls that failed before any reply used no recorded tokens and count as 0.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    calls: int = Field(default=0, ge=0, description="Calls of the model, failed ones included.")
    prompt_tokens: int = Field(default=0, ge=0)
    cached_tokens: int | None = Field(
        default=0, ge=0, description="Of the prompt tokens, those the provider's cache served."
    )
    completion_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=0.0, ge=0)

    @classmethod
    def of(cls, calls: Iterable[LLMCall]) -> CallSpend:
        total = cls()
        for call in calls:
            total = total + cls(
                calls=1,
                prompt_tokens=call.prompt_tokens,
                completion_tokens=call.completion_tokens,
                cached_tokens=call.cached_tokens if _used_tokens(call) else 0,
                cost_usd=call.cost_usd if _used_tokens(call) else 0.0,
            )
        return total

    def __add__(self, other: CallSpend) -> CallSpend:
        return CallSpend(
            calls=self.calls + other.calls,
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            cached_tokens=_sum(self.cached_tokens, other.cached_tokens),
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cost_usd=_sum(self.cost_usd, other.cost_usd),
        )


class AttemptSpend(BaseModel):
    """One attempt (a node of the tree) and what its calls of the model cost."""

    model_config = ConfigDict(extra="forbid")

    node_id: str
    kind: NodeKind
    outcome: str = Field(
        description="Its verdict's status, or 'repeat', 'no_candidate', 'not_evaluated' (yet)."
    )
    spend: CallSpend


class SearchSpend(BaseModel):
    """Every attempt's spend, in the order the search made them, and the total."""

    model_config = ConfigDict(extra="forbid")

    attempts: list[AttemptSpend] = Field(default_factory=list)
    total: CallSpend = Field(default_factory=CallSpend)


class Trajectory(BaseModel):
    version: int = VERSION
    target: str
    problem: Problem
    llm: str = Field(description="Who proposed: 'offline', or the model's name.")
    strategy: str
    seed: int = Field(description="Seeds the search's own choices (epsilon-greedy).")
    budget: Budget
    tree: Tree
    steps: int = 0
    width: int | None = Field(
        default=None,
        description="Candidates per step (set when the search starts: a resumed or replayed "
        "search grows as many, whatever GPUs it has).",
    )
    stopped: str = Field(default="", description="Why the search ended; empty while it runs.")

    def spend(self) -> SearchSpend:
        """What each attempt cost in calls of the model (the root is no attempt)."""
        attempts = [
            AttemptSpend(
                node_id=node.id, kind=node.kind, outcome=_outcome(node),
                spend=CallSpend.of(node.calls),
            )
            for node in self.tree.nodes.values()
            if node.kind != "root"
        ]  # fmt: skip
        total = sum((attempt.spend for attempt in attempts), CallSpend())
        return SearchSpend(attempts=attempts, total=total)

    def save(self, path: Path) -> None:
        """Written whole to a temporary file, then renamed over: never half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(self.model_dump_json(indent=1))
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        from harness.errors import UserError
        from harness.files import read_user_text

        fix = "pass the trajectory-*.json that an earlier optimize run wrote to its --out"
        text = read_user_text(path, "trajectory")
        try:
            trajectory = cls.model_validate_json(text)
        except ValidationError as err:
            first = err.errors()[0]
            what = (
                f"it is not JSON ({first['msg']})"
                if first["type"] == "json_invalid"
                else f"{len(err.errors())} field(s) do not hold a trajectory's values: "
                + _fields(err)
            )
            raise UserError(
                f"cannot resume from {path}: {what}",
                where=str(path),
                fix=fix,
            ) from None
        if trajectory.version != VERSION:
            raise UserError(
                f"trajectory version {trajectory.version}; this kernelpilot reads {VERSION}",
                where=str(path),
                fix="start a new run (without --resume)",
            )
        return trajectory


def _fields(err: ValidationError, shown: int = 3) -> str:
    """The first fields a validation error names, each with what was wrong and what it held."""
    parts = []
    for error in err.errors()[:shown]:
        where = ".".join(str(part) for part in error["loc"]) or "the file"
        held = "" if error["type"] == "missing" else f" (it holds {str(error['input'])[:60]!r})"
        parts.append(f"{where}: {error['msg']}{held}")
    return "; ".join(parts)


def _used_tokens(call: LLMCall) -> bool:
    return bool(call.prompt_tokens or call.completion_tokens)


def _sum(a: Number | None, b: Number | None) -> Number | None:
    return None if a is None or b is None else a + b


def _outcome(node: Node) -> str:
    if node.result is not None:
        return node.result.status.value
    if node.candidate is None:
        return "no_candidate"
    return "repeat" if node.failure else "not_evaluated"  # a repeat is never run again
