"""The nightly regression rule on tables of numbers (seeded noise, no measurement)."""

from __future__ import annotations

import random

import pytest

from bot.nightly.regression import Night, RegressionConfig, assess

SETUP = "NVIDIA H100|driver 580.159.04|torch 2.11.0|cuda 13.0"


def nights(times: list[float], setup: str = SETUP, spread: float = 0.02) -> list[Night]:
    return [Night(setup=setup, times_ms=[t], iqr_ms=spread * t) for t in times]


def noisy(count: int, level: float = 1.0, noise: float = 0.04, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-noise, noise)) for _ in range(count)]


def verdicts(times: list[float], **config) -> list[str]:
    """The verdict on each night against the nights before it."""
    series = nights(times)
    rule = RegressionConfig(**config)
    return [assess(series[: i + 1], rule).level for i in range(len(series))]


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_flat_series_never_alerts(seed):
    levels = verdicts(noisy(30, seed=seed))
    assert set(levels[3:]) == {"ok"}
    assert levels[:3] == ["too_few"] * 3


def test_a_real_step_change_alerts_and_a_large_one_fails():
    flat = noisy(10)
    assert verdicts(flat + [1.15])[-1] == "alert"
    assert verdicts(flat + [1.40])[-1] == "fail"
    assert verdicts(flat + [0.70])[-1] == "ok"  # faster is not a regression


def test_a_single_outlier_night_does_not_alert():
    times = noisy(10) + [1.6] + noisy(5, seed=1)
    levels = verdicts(times)
    assert levels[11:] == ["ok"] * 5  # the medians are not moved by one night
    # On the night itself, the run measures again: only a confirmed slowdown counts.
    series = nights(noisy(10))
    series.append(Night(setup=SETUP, times_ms=[1.6, 1.01], iqr_ms=0.02))
    verdict = assess(series)
    assert verdict.level == "ok" and verdict.suspect
    series[-1] = Night(setup=SETUP, times_ms=[1.6, 1.55], iqr_ms=0.02)
    assert assess(series).level == "fail"


def test_a_slow_drift_alerts_once_it_passes_the_threshold():
    times = [1.0 + 0.02 * night for night in range(20)]  # 2% of the start slower each night
    levels = verdicts(times)
    first = levels.index("alert")
    assert set(levels[3:first]) == {"ok"}
    # The anchor (median of the first 7 nights: night 3, 1.06) is passed by 10% at 1.166.
    assert times[first] > 1.06 * 1.10 and times[first - 1] <= 1.06 * 1.10 + 1e-9
    rolling_only = [1.0 + 0.02 * n for n in range(20)]
    assert assess(nights(rolling_only)[-8:]).level == "ok"  # what a rolling baseline alone sees


def test_a_version_change_starts_a_new_series_instead_of_alerting():
    series = nights(noisy(8)) + nights([1.5], setup=SETUP.replace("2.11.0", "2.12.0"))
    assert assess(series).level == "new_series"
    series += nights([1.5, 1.52, 1.49], setup=SETUP.replace("2.11.0", "2.12.0"))
    assert assess(series).level == "ok"  # the new series' own nights are its baseline


def test_changes_below_the_minimum_effect_or_the_measured_noise_do_not_count():
    tiny = [0.010] * 8 + [0.0118]  # +18% of 10 microseconds: under 2 microseconds
    assert verdicts(tiny)[-1] == "ok"
    spread = nights([1.0] * 8, spread=0.05) + nights([1.12])  # 3 spreads of 5%: 15%
    assert assess(spread).level == "ok"
    assert assess(nights([1.0] * 8, spread=0.01) + nights([1.12])).level == "alert"
