"""The decision rule for a busy machine, on tables of windows: a window where the OS preempted
many timed calls is not judged (neither the disturbance check nor the speedup), a quiet one is
judged as before, and a disturbance measured in quiet windows is still rejected.

The ``recorded`` rows are real windows: an honest kernel timed by ``kernelpilot evaluate`` on a
quiet 2-core machine, and the same with a CPU-bound process per core beside it
(``tests/fixtures/windows``, with the command that recorded them)."""

from __future__ import annotations

import json

import pytest

from harness.judge.busy import baseline_window
from harness.judge.verdict import judge_timing
from harness.records import EvalResult, Status, Timings, TimingStats
from harness.timings import WindowLoad
from tests.conftest import FIXTURES, fast_config

WINDOWS = FIXTURES / "windows"


def stats(median: float, preempted: int = 0, timed: int = 100, spread: float = 0.02) -> TimingStats:
    samples = timed - preempted
    return TimingStats(median_ms=median, iqr_ms=median * spread, min_ms=median * 0.95,
                       samples=samples, preempted=preempted, timed=timed)  # fmt: skip


def timings(alone=None, beside=None, after=None, candidate=None, others: float = 0.0) -> Timings:
    load = WindowLoad(seconds=1.0, cores=2.0, others_cores=others)
    return Timings(
        eager_alone=alone or stats(1.0),
        eager_beside=beside or stats(1.0),
        eager_after=after or stats(1.0),
        candidate=candidate or stats(0.5),
        windows={"alone": load, "beside": load, "after": load},
    )


def judged(measured: Timings) -> EvalResult:
    result = EvalResult(status=Status.ok, device="cpu", timings=measured)
    judge_timing(result, fast_config())
    return result


def checks(result: EvalResult) -> dict[str, bool]:
    return {check.name: check.passed for check in result.checks}


# (alone, beside, after, candidate, others' cores) -> status, and what the verdict says
TABLE = [
    # quiet: judged, 2x faster
    ((stats(1.0), stats(1.0), stats(1.0), stats(0.5), 0.0), Status.ok, "faster"),
    # a few calls preempted (under a quarter): still judged, on the rest
    ((stats(1.0, 20), stats(1.0, 10), stats(1.0), stats(0.5, 24), 0.4), Status.ok, "faster"),
    # quiet windows, eager after the candidate 3x slower than before it: a disturbance, rejected
    ((stats(1.0), stats(3.0), stats(3.0), stats(0.5), 0.0), Status.rejected, "slows"),
    # the CI failure's shape: eager alone 50x slower than after, because the alone window was
    # busy (70 of 100 calls preempted): not judged, not rejected
    ((stats(50.0, 70), stats(1.0), stats(1.0), stats(0.5), 1.9), Status.unjudged, "alone"),
    # eager beside the candidate 80x slower than after it, its window busy: not judged
    ((stats(1.0), stats(80.0, 60), stats(1.0), stats(0.5, 55), 1.8), Status.unjudged, "beside"),
    # a speedup measured while the candidate's calls were preempted: not offered
    ((stats(1.0), stats(1.0), stats(1.0), stats(0.1, 40), 1.5), Status.unjudged, "beside"),
    # only the after window was busy: the disturbance check cannot be judged either
    ((stats(1.0), stats(1.0), stats(9.0, 90), stats(0.5), 1.9), Status.unjudged, "after"),
    # calls kept waiting with no other process busy: the process's own doing (a candidate's
    # threads crowding or pinning eager's), judged, and the disturbance rejected
    ((stats(1.0), stats(4.0, 60), stats(4.0, 60), stats(0.5), 0.1), Status.rejected, "slows"),
]


@pytest.mark.parametrize(("row", "status", "said"), TABLE)
def test_the_decision_rule(row, status, said):
    alone, beside, after, candidate, others = row
    result = judged(timings(alone, beside, after, candidate, others))
    assert result.status is status, result.reason
    if status is Status.unjudged:
        assert result.reason.startswith("not judged: the machine was too busy")
        assert said in result.reason and "other processes used" in result.reason
        assert checks(result) == {"quiet_machine": False}  # nothing else was decided
        assert result.vs_eager is None and result.vs_compile is None
    else:
        assert checks(result)["quiet_machine"] is True
        assert "baseline_undisturbed" in checks(result)
    if status is Status.rejected:
        assert said in result.reason
    if status is Status.ok:
        assert result.vs_eager is not None and result.vs_eager.faster


def _measured(median: float, preempted: int, clean_median: float) -> TimingStats:
    """As a worker reports it: every call, and the undisturbed ones apart."""
    whole = stats(median)
    whole.preempted = preempted
    whole.undisturbed = stats(clean_median, timed=100 - preempted)
    return whole


@pytest.mark.parametrize(("others", "left_out", "speedup"), [(1.5, True, 2.0), (0.0, False, 0.8)])
def test_preempted_calls_are_left_out_only_where_other_processes_were_busy(
    others, left_out, speedup
):
    """A candidate that crowds its own threads on its slow calls (so they count as preempted)
    on an idle machine gets no call left out: every call counts."""
    candidate = _measured(1.25, 20, 0.5)  # its slow fifth preempted, the rest fast
    result = judged(timings(candidate=candidate, others=others))
    assert result.status is Status.ok, result.reason
    assert result.timings.candidate is not None
    assert result.timings.candidate.preempted_left_out is left_out
    assert result.timings.candidate.undisturbed is None  # what was judged, once
    assert result.vs_eager is not None and result.vs_eager.speedup == pytest.approx(speedup)
    assert f"({20 if left_out else 0} left out)" in result.checks[0].detail


def test_records_from_before_preemption_was_counted_are_judged_as_before():
    old = Timings.model_validate_json(
        '{"candidate": {"median_ms": 0.5, "iqr_ms": 0.01, "min_ms": 0.5, "samples": 50},'
        ' "eager_beside": {"median_ms": 1.0, "iqr_ms": 0.01, "min_ms": 1.0, "samples": 50},'
        ' "eager_alone": {"median_ms": 1.0, "iqr_ms": 0.01, "min_ms": 1.0, "samples": 50}}'
    )
    result = judged(old)
    assert result.status is Status.ok and checks(result)["quiet_machine"]


def _recorded() -> list[tuple[str, dict]]:
    return [(path.stem, json.loads(path.read_text())) for path in sorted(WINDOWS.glob("*.json"))]


@pytest.mark.parametrize(("name", "recorded"), _recorded(), ids=[n for n, _ in _recorded()])
def test_recorded_windows(name, recorded):
    """Each recording says what it was (quiet or loaded) and the verdict it must get."""
    result = judged(Timings.model_validate(recorded["timings"]))
    assert result.status.value in recorded["expected"], (name, result.reason)


# The nightly's baseline worker (eager and torch.compile, no candidate) is judged by the same
# rule: (eager, compiled, others' cores) -> busy, the eager median judged
BASELINE_TABLE = [
    ((stats(1.0), stats(0.8), 0.0), False, 1.0),  # quiet
    ((_measured(3.0, 10, 1.0), stats(0.8), 1.5), False, 1.0),  # a few waits left out
    ((_measured(3.0, 10, 1.0), stats(0.8), 0.0), False, 3.0),  # idle machine: every call
    ((_measured(9.0, 60, 1.0), stats(0.8), 1.5), True, 1.0),  # busy: not judged
    ((stats(1.0), _measured(9.0, 40, 0.8), 1.9), True, 1.0),  # compile's calls busy
]


@pytest.mark.parametrize(("measured", "busy", "eager_ms"), BASELINE_TABLE)
def test_the_baseline_window_is_judged_by_the_same_rule(measured, busy, eager_ms):
    eager, compiled, others = measured
    load = WindowLoad(seconds=1.0, cores=2.0, others_cores=others)
    judged_eager, judged_compiled, said = baseline_window(eager, compiled, load)
    assert bool(said) is busy
    if busy:
        assert said[0].startswith("alone: preempted") and "other processes" in said[0]
    assert judged_eager.median_ms == pytest.approx(eager_ms)
    assert judged_eager.undisturbed is None and judged_compiled is not None
