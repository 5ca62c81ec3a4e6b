"""The acceptance rule: is a candidate faster than a baseline, beyond the noise? (pure)"""

from __future__ import annotations

from harness.records import TimingStats, Verdict

# Work this short is dominated by launch and timer jitter, so it must clear a higher bar.
SHORT_WORK_MS = 0.010
SHORT_WORK_FLOOR = 0.15


def accept(
    candidate: TimingStats,
    baseline: TimingStats,
    noise_floor: float = 0.05,
    review_speedup: float = 10.0,
) -> Verdict:
    """Speedup of ``candidate`` over ``baseline`` and whether it clears the noise floor.

    The floor is the largest of: the configured floor, the higher floor for sub-10-microsecond
    work, and the measured relative spread (IQR / median) of the two timings combined.
    """
    speedup = baseline.median_ms / candidate.median_ms if candidate.median_ms > 0 else float("inf")
    floor = noise_floor
    if min(candidate.median_ms, baseline.median_ms) < SHORT_WORK_MS:
        floor = max(floor, SHORT_WORK_FLOOR)
    floor = max(floor, candidate.relative_spread + baseline.relative_spread)
    return Verdict(
        speedup=speedup,
        noise_floor=floor,
        faster=speedup > 1.0 + floor,
        needs_review=speedup > review_speedup,
    )
