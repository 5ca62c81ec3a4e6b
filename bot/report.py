"""The report record: one row per target, built once from a verdict and rendered by
``bot.render`` as a terminal table, markdown, JUnit XML and JSON (and by the benchmarks).

A row holds its target's ``EvalResult`` whole: every time, check and verdict is read from
there, and the acceptance rules are ``harness.judge.accept``'s, never derived again here."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from agents.trajectory import SearchSpend, Trajectory
from harness.judge import accept
from harness.records import Check, EvalResult, Status, Timings, Verdict


class TargetStatus(str, Enum):
    """A target's outcome: its candidate's verdict (``harness.records.Status``), or why no
    candidate was measured or shown."""

    ok = "ok"
    build_error = "build_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    incorrect = "incorrect"
    rejected = "rejected"
    harness_error = "harness_error"
    unjudged = "unjudged"  # the machine was too busy to judge its timing (harness.judge.busy)
    no_candidate = "no_candidate"
    weak_spec = "weak_spec"
    error = "error"
    refused = "refused"  # publish checked the kernel again and refused it (bot.pr.trust)

    @classmethod
    def of(cls, status: Status) -> TargetStatus:
        return cls(status.value)

    @property
    def failed(self) -> bool:
        """The target failed: a run ends in error. No candidate is not a failure (a target
        without a faster kernel is not an error)."""
        return self not in (TargetStatus.ok, TargetStatus.no_candidate)


# Shown as JUnit errors (no output was judged); the other failures as failures.
ERROR_STATUSES = frozenset(
    {
        TargetStatus.build_error,
        TargetStatus.runtime_error,
        TargetStatus.timeout,
        TargetStatus.harness_error,
        TargetStatus.unjudged,
        TargetStatus.error,
        TargetStatus.weak_spec,
    }
)


class TargetReport(BaseModel):
    """The outcome for one target: its measured result (None: no candidate was measured)
    and what is the target's own: its name, status, plan, kernel and the search's spend."""

    model_config = ConfigDict(extra="forbid")  # a field that moved is an error, not dropped

    target: str
    device: str
    status: TargetStatus
    reason: str = ""
    result: EvalResult | None = Field(
        default=None, description="The best candidate's verdict, its log shortened."
    )
    plan: str = Field(default="", description="The plan the best kernel followed (shortened).")
    kernel_source: str = Field(default="", description="The best verified candidate's source.")
    candidate_file: str | None = None
    proposer: str = Field(default="offline", description="'offline', or the LLM's model name.")
    attempts: int = Field(default=0, description="Candidates proposed for this target.")
    tokens: int = Field(default=0, description="LLM tokens spent on this target.")
    cost_usd: float | None = Field(default=None, description="LLM cost, when priced.")
    spend: SearchSpend | None = Field(
        default=None,
        description="Prompt, cached and completion tokens and cost per attempt, and their "
        "totals (None: no search ran).",
    )
    trajectory_file: str | None = Field(default=None, description="The search's trajectory.")

    def add_search(self, trajectory: Trajectory, path: Path | None) -> None:
        """What the search spent and where its trajectory is."""
        budget = trajectory.budget
        self.proposer = trajectory.llm
        self.attempts = budget.spent_attempts
        self.tokens = budget.spent_tokens
        priced = any(
            call.cost_usd is not None
            for node in trajectory.tree.nodes.values()
            for call in node.calls
        )
        self.cost_usd = budget.spent_cost_usd if priced else None
        self.spend = trajectory.spend()
        self.trajectory_file = str(path) if path else None

    @property
    def improved(self) -> bool:
        """The result is an improvement (``harness.judge.accept.improved``), still ok here
        and with a kernel to offer."""
        return (
            self.status is TargetStatus.ok
            and self.result is not None
            and accept.improved(self.result)
            and bool(self.kernel_source)
        )

    @property
    def needs_review(self) -> bool:
        return self.result is not None and accept.needs_review(self.result)

    @property
    def timings(self) -> Timings:
        """What was measured (nothing, without a result)."""
        return self.result.timings if self.result else Timings()

    @property
    def vs_eager(self) -> Verdict | None:
        return self.result.vs_eager if self.result else None

    @property
    def vs_compile(self) -> Verdict | None:
        return self.result.vs_compile if self.result else None

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.result.speedup_vs_eager if self.result else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return self.result.speedup_vs_compile if self.result else None

    @property
    def device_name(self) -> str:
        return self.result.device_name if self.result else ""

    @property
    def torch_version(self) -> str:
        return self.result.torch_version if self.result else ""

    @property
    def checks(self) -> list[Check]:
        return self.result.checks if self.result else []

    @property
    def log(self) -> str:
        return self.result.log if self.result else ""

    @property
    def input_mode(self) -> str:
        return self.result.input_mode if self.result else "as_given"

    @property
    def inputs(self) -> str:
        """The forward's inputs: float32[8, 1024], ..."""
        return self.result.input_summary if self.result else ""

    @classmethod
    def failed(cls, target: str, device: str, status: TargetStatus, reason: str) -> TargetReport:
        """A target without a measured candidate: no_candidate, weak_spec or error."""
        return cls(target=target, device=device, status=status, reason=reason)

    @classmethod
    def from_result(
        cls, target: str, result: EvalResult, candidate_file: str | None
    ) -> TargetReport:
        return cls(
            target=target,
            device=result.device,
            status=TargetStatus.of(result.status),
            reason=result.reason,
            result=result.model_copy(update={"log": result.log[-4000:]}),
            candidate_file=candidate_file,
        )


class Report(BaseModel):
    targets: list[TargetReport] = Field(default_factory=list)
    review_speedup: float = Field(
        default=10.0, description="eval.review_speedup: speedups above it ask for a human review."
    )

    def improved(self) -> list[TargetReport]:
        return [row for row in self.targets if row.improved]

    def best_speedup(self) -> float | None:
        """The largest speedup over eager among the improved targets."""
        speedups = [row.vs_eager.speedup if row.vs_eager else 0.0 for row in self.improved()]
        return max(speedups) if speedups else None
