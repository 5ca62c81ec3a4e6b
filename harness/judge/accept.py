"""The acceptance rules (pure): is a candidate faster than a baseline, or slower, beyond the
noise; does a speedup ask for a human review; is a result an improvement to offer a user. The
agents and the bot read these judgements and never derive them again."""

from __future__ import annotations

import math
from collections.abc import Callable

from harness.judge.busy import TOO_BUSY, each_worker
from harness.records import (
    Check,
    Disturbance,
    EvalResult,
    Slowdown,
    Status,
    TimingStats,
    Verdict,
)

# Work this short is dominated by launch and timer jitter, so it must clear a higher bar.
SHORT_WORK_MS = 0.010
SHORT_WORK_FLOOR = 0.15
# Eager timed after the candidate's calls (the candidate loaded, not called) may run this much
# slower than eager timed before it was loaded, beyond the measured noise, before the candidate
# is held to have left something behind that slows the baseline down. Both are timed by the
# same loop with the same code in it, so an honest candidate leaves them equal.
DISTURBANCE_LIMIT = 0.5
# Eager timed beside the candidate's calls may run this much slower than eager timed after them.
# The two loops run back to back: beside honest kernels on 10-30 us GPU problems the ratio was
# 0.91-1.16x, once 1.53x (H100, 42 workers, docs/measurement-notes.md). A call that leaves work behind
# that slows the next one down, and wears off by itself, shows only here.
INTERLEAVING_LIMIT = 1.0
# A call that takes this much longer than the baseline is slower however noisy the timing
# was: with one sample each the measured floor is infinite, and 0.43x is still no "noise".
SLOWER_FLOOR_CAP = 0.5


def accept(
    candidate: TimingStats,
    baseline: TimingStats,
    noise_floor: float = 0.05,
    review_speedup: float = 10.0,
) -> Verdict:
    """Speedup of ``candidate`` over ``baseline`` and whether it clears the noise floor.

    The floor is the largest of: the configured floor, the higher floor for sub-10-microsecond
    work, and two standard errors of the ratio of the two medians, estimated from the measured
    spreads (IQR) and sample counts: a speedup inside that band could be noise.
    """
    speedup = baseline.median_ms / candidate.median_ms if candidate.median_ms > 0 else float("inf")
    floor = noise_floor
    if min(candidate.median_ms, baseline.median_ms) < SHORT_WORK_MS:
        floor = max(floor, SHORT_WORK_FLOOR)
    floor = max(floor, 2.0 * math.hypot(_median_error(candidate), _median_error(baseline)))
    return Verdict(
        speedup=speedup,
        noise_floor=floor,
        faster=speedup > 1.0 + floor,
        slower=is_slower(speedup, floor),
        needs_review=speedup > review_speedup,
    )


def is_slower(speedup: float, noise_floor: float) -> bool:
    """Slower beyond the same noise floor that a speedup must clear to count as faster
    (capped: an infinite floor from too few samples must not hide a plainly slower kernel)."""
    return speedup * (1 + min(noise_floor, SLOWER_FLOOR_CAP)) < 1


def needs_review(result: EvalResult) -> bool:
    """A speedup over either baseline so large that a human should look before trusting it."""
    return any(verdict.needs_review for verdict in _verdicts(result))


def review_above(result: EvalResult, review_speedup: float) -> None:
    """Hold the result's speedups to a lower review threshold as well (in place): a speedup
    over it asks for a review, whatever the result said before."""
    for verdict in _verdicts(result):
        verdict.needs_review = verdict.needs_review or verdict.speedup > review_speedup


def improved(result: EvalResult) -> bool:
    """Verified, faster than eager beyond the noise, and not slower than torch.compile beyond
    it: the only kind of result offered to a user as a faster kernel."""
    return (
        result.status is Status.ok
        and result.vs_eager is not None
        and result.vs_eager.faster
        and not (result.vs_compile is not None and result.vs_compile.slower)
    )


def _verdicts(result: EvalResult) -> list[Verdict]:
    return [v for v in (result.vs_eager, result.vs_compile) if v is not None]


def _median_error(stats: TimingStats) -> float:
    """Relative standard error of a median: 1.2533 * sigma / sqrt(n), sigma ~ IQR / 1.349."""
    if stats.samples < 2 or stats.median_ms <= 0:
        return float("inf")
    sigma = stats.iqr_ms / 1.349
    return 1.2533 * sigma / math.sqrt(stats.samples) / stats.median_ms


def baseline_disturbance(
    beside: TimingStats, alone: TimingStats, after: TimingStats | None = None
) -> Disturbance:
    """Did the candidate slow the eager baseline down, beyond the noise?

    ``alone`` is eager timed in the candidate's worker before any candidate code was loaded,
    ``after`` in the same loop once the candidate's timed calls are done (it stays loaded),
    ``beside`` interleaved with the candidate. Whatever a candidate leaves behind (pinned
    threads, flipped flags, a slower allocator, a busy device) shows in ``after`` against
    ``alone``; whatever each of its calls does to the call after it, in ``beside`` against
    ``after``. Without ``after``, ``beside`` is held to the lasting limit.
    """
    if after is None:
        return Disturbance(lasting=slowdown(beside, alone, DISTURBANCE_LIMIT))
    return Disturbance(
        lasting=slowdown(after, alone, DISTURBANCE_LIMIT),
        interleaved=slowdown(beside, after, INTERLEAVING_LIMIT),
    )


def slowdown(slower: TimingStats, faster: TimingStats, limit: float) -> Slowdown:
    """``slower`` against ``faster``: beyond the noise when both the medians and the fastest
    calls are more than ``limit`` (or three standard errors of the medians) apart. A burst of
    load from elsewhere on the machine moves the medians, a lasting disturbance every call."""
    ratio = _ratio(slower.median_ms, faster.median_ms)
    fastest_ratio = _ratio(slower.min_ms, faster.min_ms)
    allowed = 1.0 + max(limit, 3.0 * math.hypot(_median_error(slower), _median_error(faster)))
    return Slowdown(
        ratio=ratio,
        fastest_ratio=fastest_ratio,
        allowed=allowed,
        beyond=min(ratio, fastest_ratio) > allowed,
    )


def measure_until_judged(
    measure: Callable[[], EvalResult],
    busy_retries: int = 2,
    on_retry: Callable[[str], None] = lambda why: None,
) -> EvalResult:
    """Measure; measure again in a fresh worker while the verdict cannot stand.

    A window the machine was too busy to judge (``Status.unjudged``) is measured again up to
    ``busy_retries`` times; the last one stays unjudged, with how many tries it had. A baseline
    that looked disturbed in a quiet window is measured once more: load from elsewhere that
    starts after eager was timed alone looks like a disturbance once, a candidate that slows
    the baseline down does it in every worker. The last measurement is the one reported, the
    earlier ones' figures in its detail.
    """
    result = measure()
    busy_left, disturbance_left = busy_retries, 1
    earlier: list[str] = []
    while True:
        disturbance = _disturbance_check(result)
        if result.status is Status.unjudged and busy_left > 0:
            busy_left -= 1
            why = TOO_BUSY
            earlier.append(result.reason)
        elif disturbance is not None and not disturbance.passed and disturbance_left > 0:
            disturbance_left -= 1
            why = "the baseline ran slower beside the candidate"
            earlier.append(disturbance.detail)
        else:
            break
        on_retry(why)
        result = measure()
    if earlier:
        _say_earlier(result, earlier)
    return result


def _say_earlier(result: EvalResult, earlier: list[str]) -> None:
    """The earlier measurements' figures, after the reported one's: in its disturbance check,
    or, where it has none (not judged, or it failed another way), in its reason."""
    said = "; ".join(each_worker(earlier))
    disturbance = _disturbance_check(result)
    if disturbance is not None:
        disturbance.detail = f"{disturbance.detail}; earlier {said}"
    else:
        result.reason = f"{result.reason}; measured {len(earlier) + 1} times ({said})"


def _disturbance_check(result: EvalResult) -> Check | None:
    return next((c for c in result.checks if c.name == "baseline_undisturbed"), None)


def _ratio(slower: float, faster: float) -> float:
    return slower / faster if faster > 0 else 1.0
