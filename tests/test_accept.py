"""The acceptance rule on tables of numbers."""

from __future__ import annotations

import pytest

from harness.judge.accept import (
    accept,
    baseline_disturbance,
    improved,
    is_slower,
    measure_until_judged,
    needs_review,
    review_above,
    slowdown,
)
from harness.records import Check, EvalResult, Status, Timings, TimingStats, Verdict


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


def timed(median: float, fastest: float, iqr: float = 0.0, samples: int = 100) -> TimingStats:
    return TimingStats(median_ms=median, iqr_ms=iqr, min_ms=fastest, samples=samples)


@pytest.mark.parametrize(
    ("slower", "faster", "beyond"),
    [
        (stats(1.0), stats(1.0), False),  # the same
        (stats(1.3), stats(1.0), False),  # 30% slower: within what load does to a cpu
        (stats(2.0), stats(1.0), True),  # half speed: slowed down
        (stats(0.8), stats(1.0), False),  # faster: never a slowdown
        (stats(2.0, iqr=4.0, samples=5), stats(1.0, iqr=2.0, samples=5), False),  # all noise
        (stats(16.0, iqr=4.0, samples=5), stats(1.0, iqr=0.1, samples=50), True),  # 16x: no noise
        (timed(16.0, 0.6), timed(1.0, 0.5), False),  # medians moved, fastest calls did not: load
        (timed(16.0, 12.8), timed(0.9, 0.5), True),  # every call slower: pinned to one core
    ],
)
def test_slowdown_table(slower, faster, beyond):
    result = slowdown(slower, faster, limit=0.5)
    assert result.beyond is beyond
    assert result.ratio == pytest.approx(slower.median_ms / faster.median_ms)
    assert result.allowed >= 1.5


@pytest.mark.parametrize(
    ("alone", "beside", "after", "disturbed"),
    [
        # An honest kernel on a host-bound GPU problem: eager's host path runs slower between
        # other code's calls (H100: 1.0-1.4x), and is back to its alone time after them.
        (timed(0.10, 0.07), timed(0.14, 0.10), timed(0.10, 0.07), False),
        # Something left behind (pinned threads, a flipped flag): slower after, as beside.
        (timed(0.10, 0.07), timed(0.18, 0.13), timed(0.18, 0.13), True),
        # Each call slows the next one down and it wears off: only beside.
        (timed(0.10, 0.07), timed(0.50, 0.40), timed(0.11, 0.08), True),
        # Without the after loop, beside is held to the lasting limit, as before.
        (timed(0.10, 0.07), timed(0.18, 0.13), None, True),
        (timed(0.10, 0.07), timed(0.14, 0.10), None, False),
    ],
)
def test_baseline_disturbance_tells_what_is_left_behind_from_interleaving(
    alone, beside, after, disturbed
):
    result = baseline_disturbance(beside, alone, after)
    assert result.disturbed is disturbed
    assert (result.interleaved is None) is (after is None)


@pytest.mark.parametrize(
    ("beside", "alone", "expected"),
    [(stats(2.0), stats(1.0), 1.0), (stats(1.0), stats(1.2), 1.0), (stats(1.0), None, 1.0)],
)
def test_speedups_use_the_faster_eager_measurement(beside, alone, expected):
    timings = Timings(eager_beside=beside, eager_alone=alone, compiled_beside=beside,
                      compiled_alone=alone)  # fmt: skip
    assert timings.eager is not None and timings.eager.median_ms == expected
    assert timings.compiled is not None and timings.compiled.median_ms == expected


def test_without_a_baseline_beside_the_candidate_there_is_no_honest_baseline():
    assert Timings(eager_alone=stats(1.0), compiled_alone=stats(1.0)).eager is None
    assert Timings(eager_alone=stats(1.0), compiled_alone=stats(1.0)).compiled is None


@pytest.mark.parametrize(
    ("speedup", "floor", "slower"),
    [
        (0.83, 0.05, True),  # beyond the floor
        (0.98, 0.05, False),  # inside it
        (0.43, float("inf"), True),  # an infinite floor is capped: plainly slower is slower
        (0.7, float("inf"), False),  # inside the cap
        (1.5, 0.05, False),
    ],
)
def test_slower_beyond_the_noise_floor_with_the_floor_capped(speedup, floor, slower):
    assert is_slower(speedup, floor) is slower


def verdict(speedup: float, faster: bool, slower: bool = False, review: bool = False) -> Verdict:
    return Verdict(speedup=speedup, noise_floor=0.05, faster=faster, slower=slower,
                   needs_review=review)  # fmt: skip


@pytest.mark.parametrize(
    ("status", "vs_eager", "vs_compile", "expected"),
    [
        (Status.ok, verdict(2.0, True), verdict(1.5, True), True),
        (Status.ok, verdict(2.0, True), verdict(0.98, False), True),  # ties torch.compile
        (Status.ok, verdict(2.0, True), None, True),  # torch.compile not measured
        (Status.ok, verdict(2.0, True), verdict(0.6, False, slower=True), False),
        (Status.ok, verdict(1.02, False), verdict(1.5, True), False),  # within the noise
        (Status.ok, None, None, False),
        (Status.incorrect, verdict(2.0, True), verdict(1.5, True), False),
    ],
)
def test_improved_is_verified_faster_than_eager_and_not_slower_than_compile(
    status, vs_eager, vs_compile, expected
):
    result = EvalResult(status=status, vs_eager=vs_eager, vs_compile=vs_compile)
    assert improved(result) is expected


def test_a_review_is_asked_for_by_either_speedup_and_by_a_lower_threshold():
    result = EvalResult(status=Status.ok, vs_eager=verdict(4.0, True),
                        vs_compile=verdict(12.0, True, review=True))  # fmt: skip
    assert needs_review(result)
    result.vs_compile = verdict(3.0, True)
    assert not needs_review(result)
    review_above(result, 5.0)
    assert not needs_review(result)
    review_above(result, 3.5)
    assert needs_review(result) and result.vs_eager is not None and result.vs_eager.needs_review
    assert result.vs_compile is not None and not result.vs_compile.needs_review


def measured(*script: str):
    """A measure() that returns one scripted result per call: "ok", "disturbed" (rejected by
    the disturbance check in a quiet window) or "busy" (not judged)."""
    results = []
    for n, kind in enumerate(script):
        if kind == "busy":
            checks = [Check(name="quiet_machine", passed=False, detail=f"beside: run {n}")]
            status, reason = Status.unjudged, f"not judged: the machine was too busy (run {n})"
        else:
            bad = kind == "disturbed"
            checks = [Check(name="baseline_undisturbed", passed=not bad, detail=f"run {n}")]
            status, reason = (Status.rejected if bad else Status.ok), ""
        results.append(EvalResult(status=status, reason=reason, device="cpu", checks=checks))
    calls = []

    def measure() -> EvalResult:
        calls.append(1)
        return results[len(calls) - 1]

    return measure, calls


@pytest.mark.parametrize(
    ("script", "runs", "status"),
    [
        (("ok",), 1, Status.ok),  # undisturbed: measured once
        (("disturbed", "ok"), 2, Status.ok),  # load once: the fresh worker's numbers count
        (("disturbed", "disturbed"), 2, Status.rejected),  # slowed down in both workers
        (("busy", "ok"), 2, Status.ok),  # busy once: judged in the next worker
        (("busy", "busy", "ok"), 3, Status.ok),
        (("busy", "busy", "busy"), 3, Status.unjudged),  # never quiet: not judged, not rejected
        (("busy", "disturbed", "ok"), 3, Status.ok),  # each kind of retry counted on its own
        (("busy", "disturbed", "disturbed"), 3, Status.rejected),
    ],
)
def test_a_verdict_that_cannot_stand_is_measured_again_in_a_fresh_worker(script, runs, status):
    measure, calls = measured(*script)
    retried = []
    result = measure_until_judged(measure, busy_retries=2, on_retry=retried.append)
    assert len(calls) == runs and result.status is status
    assert len(retried) == runs - 1
    if runs > 1:
        said = result.reason if status is Status.unjudged else result.checks[0].detail
        assert "worker 1: " in said and "run 0" in said, said
    if status is Status.unjudged:
        assert "measured 3 times" in result.reason


def test_no_busy_retry_when_none_are_allowed():
    measure, calls = measured("busy", "ok")
    assert measure_until_judged(measure, busy_retries=0).status is Status.unjudged
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("reps", "candidate_ms", "eager_ms", "done"),
    [
        (5, 400.0, 400.0, False),  # fewer than min_reps calls: go on
        (10, 100.0, 100.0, False),  # 1 s each of a 1.5 s budget: go on
        (10, 200.0, 200.0, True),  # 2 s each: done
        (10, 1000.0, 1.0, False),  # the candidate 1000x slower, at 10 s: go on
        (15, 1000.0, 1.0, True),  # at 15 s (10 budgets) it stops, though eager had 15 ms
    ],
)
def test_timing_stops_when_every_budget_is_spent_or_the_slowest_took_ten(
    reps, candidate_ms, eager_ms, done
):
    from harness.workers.timers import Timed
    from harness.workers.timing import Calls, timed_enough

    calls = {"candidate": Calls(), "eager": Calls()}
    for _ in range(reps):
        calls["candidate"].add(Timed(candidate_ms, None, preempted=False))
        calls["eager"].add(Timed(eager_ms, None, preempted=False))
    assert timed_enough(calls, min_reps=10, budget_s=1.5) is done


@pytest.mark.parametrize(
    ("clean", "preempted", "done"),
    [
        (10, 0, True),  # 10 undisturbed calls of 200 ms: budget spent
        (6, 4, False),  # the budget is spent but 4 calls were preempted: time more
        (10, 4, True),
        (6, 70, True),  # the slowest took 10 budgets: stop, however few ran undisturbed
    ],
)
def test_preempted_calls_do_not_count_toward_the_fewest_calls(clean, preempted, done):
    from harness.workers.timers import Timed
    from harness.workers.timing import Calls, timed_enough

    calls = {"candidate": Calls(), "eager": Calls()}
    for hit in [False] * clean + [True] * preempted:
        for implementation in calls.values():
            implementation.add(Timed(200.0, None, preempted=hit))
    assert timed_enough(calls, min_reps=10, budget_s=1.5) is done


def test_statistics_keep_the_preempted_calls_apart():
    from harness.workers.timers import summarize

    stats = summarize([1.0, 1.1, 50.0, 0.9, 80.0], [False, False, True, False, True])
    assert (stats.median_ms, stats.min_ms, stats.samples, stats.preempted) == (1.1, 0.9, 5, 2)
    assert stats.preempted_share == 0.4 and stats.undisturbed is not None
    assert (stats.undisturbed.median_ms, stats.undisturbed.samples) == (1.0, 3)
    everything = summarize([50.0, 80.0], [True, True])  # none undisturbed: nothing apart
    assert everything.undisturbed is None and everything.preempted_share == 1.0
