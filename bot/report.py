"""The report record: one row per target, built once from a verdict and rendered by
``bot.render`` as a terminal table, markdown, JUnit XML and JSON (and by the benchmarks)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

from agents.trajectory import Trajectory
from harness.judge.accept import honest_baseline
from harness.records import Check, EvalResult, Verdict


class TargetReport(BaseModel):
    """The outcome for one target; ``status`` is an EvalResult status or a target-level one."""

    target: str
    device: str
    device_name: str = ""
    torch_version: str = ""
    status: str = Field(description="ok, a failure status, no_candidate, weak_spec or error.")
    reason: str = ""
    eager_ms: float | None = Field(
        default=None,
        description="The eager time speedup_vs_eager is taken against: the faster of "
        "eager_beside_ms and eager_alone_ms.",
    )
    eager_beside_ms: float | None = Field(
        default=None, description="Eager timed interleaved with the candidate."
    )
    eager_alone_ms: float | None = Field(
        default=None, description="Eager timed before the candidate was loaded (same worker)."
    )
    eager_after_ms: float | None = Field(
        default=None,
        description="Eager timed after the candidate's timed calls (same worker): with "
        "eager_alone_ms, what the disturbance check compares.",
    )
    compile_ms: float | None = Field(
        default=None,
        description="The torch.compile time speedup_vs_compile is taken against: the faster "
        "of torch.compile beside the candidate and before it was loaded.",
    )
    candidate_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    faster_than_eager: bool = False
    faster_than_compile: bool = False
    noise_floor: float | None = None
    slower_than_eager: bool = Field(
        default=False, description="Slower than eager beyond the noise floor."
    )
    slower_than_compile: bool = False
    needs_review: bool = False
    max_abs_error: float | None = None
    rel_error: float | None = None
    input_mode: str = "as_given"
    inputs: str = Field(default="", description="The forward's inputs: float32[8, 1024], ...")
    plan: str = Field(default="", description="The plan the best kernel followed (shortened).")
    kernel_source: str = Field(default="", description="The best verified candidate's source.")
    compile_baseline_error: str | None = None
    candidate_file: str | None = None
    checks: list[Check] = Field(default_factory=list)
    log: str = ""
    proposer: str = Field(default="offline", description="'offline', or the LLM's model name.")
    attempts: int = Field(default=0, description="Candidates proposed for this target.")
    tokens: int = Field(default=0, description="LLM tokens spent on this target.")
    cost_usd: float | None = Field(default=None, description="LLM cost, when priced.")
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
        self.trajectory_file = str(path) if path else None

    @property
    def improved(self) -> bool:
        """Verified, faster than eager beyond the noise, and not slower than torch.compile
        beyond it: the only kind of result offered to a user as a faster kernel."""
        return (
            self.status == "ok"
            and self.faster_than_eager
            and not self.slower_than_compile
            and bool(self.kernel_source)
        )

    @classmethod
    def failed(cls, target: str, device: str, status: str, reason: str) -> TargetReport:
        """A target without a measured candidate: no_candidate, weak_spec or error."""
        return cls(target=target, device=device, status=status, reason=reason)

    @classmethod
    def from_result(
        cls, target: str, result: EvalResult, candidate_file: str | None
    ) -> TargetReport:
        return cls(
            target=target,
            device=result.device,
            device_name=result.device_name,
            torch_version=result.torch_version,
            status=result.status.value,
            reason=result.reason,
            eager_ms=honest_baseline(result.eager, result.eager_alone).median_ms
            if result.eager
            else None,
            eager_beside_ms=result.eager.median_ms if result.eager else None,
            eager_alone_ms=result.eager_alone.median_ms if result.eager_alone else None,
            eager_after_ms=result.eager_after.median_ms if result.eager_after else None,
            compile_ms=honest_baseline(result.compiled, result.compiled_alone).median_ms
            if result.compiled
            else None,
            candidate_ms=result.candidate.median_ms if result.candidate else None,
            speedup_vs_eager=result.speedup_vs_eager,
            speedup_vs_compile=result.speedup_vs_compile,
            faster_than_eager=bool(result.vs_eager and result.vs_eager.faster),
            faster_than_compile=bool(result.vs_compile and result.vs_compile.faster),
            noise_floor=result.vs_eager.noise_floor if result.vs_eager else None,
            slower_than_eager=_slower(result.vs_eager),
            slower_than_compile=_slower(result.vs_compile),
            needs_review=bool(result.vs_eager and result.vs_eager.needs_review)
            or bool(result.vs_compile and result.vs_compile.needs_review),
            max_abs_error=result.max_abs_error,
            rel_error=result.rel_error,
            input_mode=result.input_mode,
            inputs=result.input_summary,
            compile_baseline_error=result.compile_baseline_error,
            candidate_file=candidate_file,
            checks=result.checks,
            log=result.log[-4000:],
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
        speedups = [row.speedup_vs_eager or 0.0 for row in self.improved()]
        return max(speedups) if speedups else None


# A call that takes this much longer than the baseline is slower however noisy the timing
# was: with one sample each the measured floor is infinite, and 0.43x is still no "noise".
SLOWER_FLOOR_CAP = 0.5


def _slower(verdict: Verdict | None) -> bool:
    """Slower beyond the same noise floor that a speedup must clear to count as faster
    (capped: an infinite floor from too few samples must not hide a plainly slower kernel)."""
    if verdict is None:
        return False
    return verdict.speedup * (1 + min(verdict.noise_floor, SLOWER_FLOOR_CAP)) < 1
