"""The timing records: one implementation's per-call times, the verdict of a comparison
beside the noise, the baseline's disturbance, and ``Timings``, every time measured for a
candidate with the honest baselines taken once (``harness.records`` re-exports them)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator


class TimingStats(BaseModel):
    """Per-call times of one implementation, in milliseconds."""

    median_ms: float
    iqr_ms: float
    min_ms: float
    samples: int = Field(description="Calls the statistics are taken over.")
    preempted: int = Field(
        default=0,
        description="Timed calls during which the process's threads waited for a core "
        "(harness.workers.timers).",
    )
    timed: int = Field(default=0, description="Calls timed (0 in records from before: samples).")
    preempted_left_out: bool = Field(
        default=False,
        description="The statistics leave the preempted calls out: other processes were busy "
        "during the window (harness.judge.busy); else every timed call counts.",
    )
    undisturbed: TimingStats | None = Field(
        default=None,
        description="As measured: the statistics of the calls that were not preempted, where "
        "some were; the judge takes them where other processes were busy.",
    )

    @property
    def calls(self) -> int:
        """Calls timed (a record from before ``timed`` was kept: its samples)."""
        return self.timed or self.samples

    @property
    def preempted_share(self) -> float:
        """The share of timed calls that were preempted."""
        return self.preempted / self.calls if self.calls else 0.0

    @property
    def relative_spread(self) -> float:
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


class WindowLoad(BaseModel):
    """The machine while one timing window ran (``harness.workers.machine_load``)."""

    seconds: float = Field(description="The window's wall time.")
    cores: float = Field(description="The machine's CPU seconds per second (its cores).")
    others_cores: float = Field(
        description="Cores' worth of CPU time other processes used during the window."
    )

    def describe(self) -> str:
        return f"other processes used {self.others_cores:.1f} of {self.cores:.0f} cores"


class Verdict(BaseModel):
    """Output of the pure acceptance function (``harness.judge.accept.accept``)."""

    # One call timed once leaves an infinite floor: JSON has no number for it, so a string.
    model_config = ConfigDict(ser_json_inf_nan="strings")

    speedup: float
    noise_floor: float
    faster: bool = Field(description="Faster beyond the noise floor.")
    slower: bool = Field(description="Slower beyond the noise floor (capped: see accept).")
    needs_review: bool

    @model_validator(mode="before")
    @classmethod
    def _saved_without_slower(cls, data: Any) -> Any:
        """A verdict saved before ``slower`` was recorded: the same rule decides it now."""
        if isinstance(data, dict) and "slower" not in data and "speedup" in data:
            from harness.judge.accept import is_slower

            data = {**data, "slower": is_slower(data["speedup"], data["noise_floor"])}
        return data


class Slowdown(BaseModel):
    """One eager measurement over another (see ``harness.judge.accept.slowdown``)."""

    ratio: float = Field(description="Median over median.")
    fastest_ratio: float = Field(description="Fastest call over fastest call.")
    allowed: float = Field(description="The largest ratio that counts as noise.")
    beyond: bool = Field(description="Both ratios are above the allowed one.")

    def describe(self, what: str, than: str) -> str:
        return (
            f"eager {what} took {self.ratio:.2f}x its time {than} (fastest call: "
            f"{self.fastest_ratio:.2f}x; allowed: {self.allowed:.2f}x)"
        )


class Disturbance(BaseModel):
    """Did the candidate slow the eager baseline down (see ``harness.judge.accept``)?"""

    lasting: Slowdown = Field(
        description="Eager after the candidate's calls (or beside them, where not timed after) "
        "over eager before the candidate was loaded: what the candidate left behind."
    )
    interleaved: Slowdown | None = Field(
        default=None,
        description="Eager beside the candidate's calls over eager after them: what each call "
        "does to the next one, beyond running other code in between.",
    )

    @property
    def disturbed(self) -> bool:
        return self.lasting.beyond or (self.interleaved is not None and self.interleaved.beyond)


def honest_baseline(beside: TimingStats, alone: TimingStats | None) -> TimingStats:
    """The faster of a baseline's two measurements, beside the candidate and before it was
    loaded: a slowed-down baseline never inflates a speedup."""
    if alone is None or beside.median_ms <= alone.median_ms:
        return beside
    return alone


class Timings(BaseModel):
    """Every time measured for one candidate, and the honest baselines taken from them once."""

    candidate: TimingStats | None = None
    eager_beside: TimingStats | None = Field(
        default=None, description="Eager timed interleaved with the candidate."
    )
    eager_alone: TimingStats | None = Field(
        default=None, description="Eager timed in the worker before the candidate was loaded."
    )
    eager_after: TimingStats | None = Field(
        default=None,
        description="Eager timed in the same worker after the candidate's timed calls, the "
        "candidate loaded but not called.",
    )
    compiled_beside: TimingStats | None = Field(
        default=None, description="torch.compile timed interleaved with the candidate."
    )
    compiled_alone: TimingStats | None = Field(
        default=None,
        description="torch.compile timed in the worker before the candidate was loaded.",
    )
    compile_baseline_error: str | None = Field(
        default=None, description="Why torch.compile could not be measured, if it could not."
    )
    windows: dict[str, WindowLoad] = Field(
        default_factory=dict,
        description="The machine during each timing window: alone (before the candidate was "
        "loaded), beside (interleaved with it), after (once its calls were done).",
    )

    @computed_field(  # type: ignore[prop-decorator]
        description="The eager time speedups are taken against: the faster of beside and alone."
    )
    @property
    def eager(self) -> TimingStats | None:
        if self.eager_beside is None:
            return None
        return honest_baseline(self.eager_beside, self.eager_alone)

    @computed_field(  # type: ignore[prop-decorator]
        description="The torch.compile time speedups are taken against: the faster of beside "
        "and alone."
    )
    @property
    def compiled(self) -> TimingStats | None:
        if self.compiled_beside is None:
            return None
        return honest_baseline(self.compiled_beside, self.compiled_alone)
