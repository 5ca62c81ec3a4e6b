"""Report rows for the tests: a target's measured result built from a few times, its verdicts
judged by the real acceptance rule (``harness.judge.accept``)."""

from __future__ import annotations

from bot.report import TargetReport, TargetStatus
from harness.judge.accept import accept
from harness.records import EvalResult, Status, Timings, TimingStats


def timed(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms, samples=100)


def measured_row(
    target: str,
    *,
    eager_ms: float = 1.0,
    compile_ms: float | None = 0.8,
    candidate_ms: float = 0.5,
    status: Status = Status.ok,
    review_speedup: float = 10.0,
    result_fields: dict | None = None,
    **row_fields,
) -> TargetReport:
    """A row whose result was timed at these medians (eager and torch.compile beside the
    candidate) and judged; ``result_fields`` go to the result, ``row_fields`` to the row."""
    timings = Timings(
        candidate=timed(candidate_ms),
        eager_beside=timed(eager_ms),
        compiled_beside=timed(compile_ms) if compile_ms is not None else None,
    )
    result = EvalResult(status=status, timings=timings, **(result_fields or {}))
    if timings.eager is not None and timings.candidate is not None:
        result.vs_eager = accept(timings.candidate, timings.eager, 0.05, review_speedup)
    if timings.compiled is not None and timings.candidate is not None:
        result.vs_compile = accept(timings.candidate, timings.compiled, 0.05, review_speedup)
    fields = dict(target=target, device=result.device, status=TargetStatus.of(status),
                  result=result)  # fmt: skip
    return TargetReport(**(fields | row_fields))
