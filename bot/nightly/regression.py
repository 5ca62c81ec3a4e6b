"""The nightly regression rule: has a benchmark got slower? (pure)

A series is one benchmark's nights on one machine setup: the same device, driver, torch and
CUDA. A change of any of them starts a new series rather than raising an alert: a new driver
is a new baseline, not a regression of the code.

Each night is compared with two baselines of its series, both medians (one outlier night
moves neither):

- the rolling baseline, the median of the last ``window`` nights before it: a step change;
- the anchor, the median of the series' first ``window`` nights: a slow drift, which a rolling
  baseline follows and never sees, once its total passes the threshold.

A night is slower than a baseline when its time exceeds it by more than the larger of the
relative threshold, ``noise_iqrs`` times the baseline nights' spread (their median IQR,
relative), and the minimum effect in milliseconds (a 2 µs change of a 10 µs kernel is 20%,
and still nothing to wake anyone for). Two levels: ``alert`` (an issue) and ``fail`` (the
job fails). A suspected regression is measured again in the same run; it counts only if
every measurement of the night is slower (``Night.times``), so a single noisy measurement
never alerts. Too few earlier nights (under ``min_nights``): no verdict yet.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Level = Literal["ok", "alert", "fail", "new_series", "too_few"]


class RegressionConfig(BaseModel):
    """``[tool.kernelpilot.nightly]`` thresholds."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(default=7, ge=1, description="Nights in a baseline.")
    min_nights: int = Field(default=3, ge=1, description="Earlier nights needed for a verdict.")
    alert_threshold: float = Field(default=0.10, gt=0, description="Slower by this: an alert.")
    fail_threshold: float = Field(default=0.25, gt=0, description="Slower by this: a failure.")
    noise_iqrs: float = Field(default=3.0, ge=0, description="Spreads a change must exceed.")
    min_effect_ms: float = Field(default=0.002, ge=0, description="Smaller changes never count.")


class Night(BaseModel):
    """One benchmark's measurements of one night."""

    setup: str = Field(description="Device, driver, torch and CUDA: a change starts a new series.")
    times_ms: list[float] = Field(
        min_length=1, description="The night's median time, then any re-measurements of it."
    )
    iqr_ms: float = Field(default=0.0, ge=0, description="Spread of the night's timed calls.")

    @property
    def time_ms(self) -> float:
        return self.times_ms[0]


class Verdict(BaseModel):
    level: Level
    reason: str
    baseline_ms: float | None = None
    change: float | None = Field(default=None, description="Relative change vs the baseline.")
    suspect: bool = Field(
        default=False, description="Slower on its first measurement: measure it again."
    )


def series_of(nights: Sequence[Night]) -> list[Night]:
    """The last night's series: the nights since its setup last changed."""
    if not nights:
        return []
    setup = nights[-1].setup
    start = len(nights)
    while start > 0 and nights[start - 1].setup == setup:
        start -= 1
    return list(nights[start:])


def assess(nights: Sequence[Night], config: RegressionConfig | None = None) -> Verdict:
    """The verdict on the last of ``nights`` (oldest first) against the nights before it."""
    config = config or RegressionConfig()
    if not nights:
        return Verdict(level="too_few", reason="no nights recorded")
    series = series_of(nights)
    night, earlier = series[-1], series[:-1]
    if not earlier and len(nights) > 1:
        return Verdict(level="new_series", reason=f"setup changed to {night.setup}: a new series")
    if len(earlier) < config.min_nights:
        return Verdict(
            level="too_few",
            reason=f"{len(earlier)} earlier night(s) on this setup, {config.min_nights} needed",
        )
    rolling = earlier[-config.window :]
    anchor = earlier[: config.window]
    return worst(
        [
            _against(night, base, name, config)
            for name, base in (("the last nights", rolling), ("the series' first nights", anchor))
        ]
    )


def worst(verdicts: Sequence[Verdict]) -> Verdict:
    """The verdict to report of several (fail over alert over ok; then the larger slowdown);
    suspect when any is."""
    chosen = max(verdicts, key=_rank)
    return chosen.model_copy(update={"suspect": any(v.suspect for v in verdicts)})


def _against(night: Night, base: list[Night], name: str, config: RegressionConfig) -> Verdict:
    baseline = statistics.median(n.time_ms for n in base)
    spread = statistics.median(n.iqr_ms for n in base) / baseline if baseline > 0 else 0.0
    noise = config.noise_iqrs * spread
    change = night.time_ms / baseline - 1 if baseline > 0 else 0.0
    confirmed = min(night.times_ms) / baseline - 1 if baseline > 0 else 0.0
    floor = config.min_effect_ms / baseline if baseline > 0 else 0.0

    def beyond(threshold: float, value: float) -> bool:
        return value > max(threshold, noise, floor)

    text = f"{change:+.1%} vs {name} (median {baseline:.4f} ms)"
    level: Level = "ok"
    if beyond(config.fail_threshold, confirmed):
        level = "fail"
    elif beyond(config.alert_threshold, confirmed):
        level = "alert"
    suspect = beyond(config.alert_threshold, change)
    if suspect and level == "ok":
        text += ": not confirmed by its re-measurement" if len(night.times_ms) > 1 else ""
    return Verdict(level=level, reason=text, baseline_ms=baseline, change=change, suspect=suspect)


def _rank(verdict: Verdict) -> tuple[int, float]:
    order = {"ok": 0, "alert": 1, "fail": 2}
    return order.get(verdict.level, 0), verdict.change or 0.0
