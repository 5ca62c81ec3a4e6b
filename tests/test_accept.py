"""The acceptance rule on tables of numbers."""

from __future__ import annotations

import pytest

from harness.accept import accept
from harness.records import TimingStats


def stats(median: float, iqr: float = 0.0, samples: int = 100) -> TimingStats:
    return TimingStats(median_ms=median, iqr_ms=iqr, min_ms=median * 0.9, samples=samples)


@pytest.mark.parametrize(
    ("candidate", "baseline", "faster", "review"),
    [
        (stats(1.0), stats(2.0), True, False),  # clear 2x
        (stats(1.0), stats(1.04), False, False),  # 4%: under the 5% floor
        (stats(1.0), stats(1.06), True, False),  # 6%, no spread: over the floor
        (stats(1.0, iqr=1.0, samples=10), stats(1.2, iqr=1.2, samples=10), False, False),  # noisy
        (stats(1.0, iqr=0.1, samples=200), stats(1.2, iqr=0.1, samples=200), True, False),
        (stats(0.005), stats(0.0055), False, False),  # sub-10us: 10% is not enough
        (stats(0.005), stats(0.0060), True, False),  # sub-10us: 20% is
        (stats(1.0), stats(11.0), True, True),  # >10x: flagged for review
        (stats(2.0), stats(1.0), False, False),  # slower
    ],
)
def test_accept_table(candidate, baseline, faster, review):
    verdict = accept(candidate, baseline, noise_floor=0.05, review_speedup=10.0)
    assert verdict.faster is faster
    assert verdict.needs_review is review
    assert verdict.speedup == pytest.approx(baseline.median_ms / candidate.median_ms)


def test_floor_grows_with_spread_and_shrinks_with_samples():
    few = accept(stats(1.0, iqr=0.5, samples=10), stats(1.5, iqr=0.5, samples=10)).noise_floor
    many = accept(stats(1.0, iqr=0.5, samples=1000), stats(1.5, iqr=0.5, samples=1000)).noise_floor
    assert few > many >= 0.05
