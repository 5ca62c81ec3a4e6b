"""Timing inside the candidate's timing worker.

The timing worker is a fresh process: the checks ran in another one. A profiler session, even
a CPU-only one, leaves the process slower for the rest of its life (1.5-1.8x per call on a
10-microsecond GPU problem, docs/measurement-notes.md), so no profiler runs here before the timing ends.

Eager is first timed alone, before any candidate code is loaded into the process (after one
whole loop thrown away: a fresh process is slow for a while), in the very loop that later
times it beside the candidate: copies of the reference stand in the
candidate's place (going through the same per-call checks) and the compiled baseline is in its
own, so the two eager measurements see the same work between calls and differ only by the
candidate. (On a GPU most of a small problem's time is host work, which slows when other work
runs between calls: eager timed back to back ran 1.5x faster than eager between checked calls
on an H100.) Then the candidate, eager and ``torch.compile`` are timed interleaved, each timed
call on inputs drawn from a seed drawn at that moment, and every timed candidate call is
checked again (plain tensor outputs, no alias of an input, inputs unchanged, fresh memory,
right against eager). Last, eager is timed once more the way it was timed alone, the
candidate loaded but no longer called. The parent compares the three eager measurements
(``harness.judge.accept.baseline_disturbance``): a candidate that slows the baselines down shows up
there, whatever it did.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from harness.problem.cases import build_reference, make_inputs
from harness.records import Check, Timings, TimingStats
from harness.sandbox.jobs import CandidateReport, WorkerJob
from harness.timings import WindowLoad
from harness.workers import guards, streams
from harness.workers.calls import bound
from harness.workers.machine_load import LoadMeter
from harness.workers.timed_checks import TimedChecks, Window, check_unpatched
from harness.workers.timers import Timed, Timer, summarize

_SEEDS = random.SystemRandom()

# Told when a timing window opens (True) and closes (False): the worker's entry tells its parent,
# which pauses its builds meanwhile (harness.sandbox.quiet). Empty where no parent listens.
WINDOW_LISTENERS: list[Callable[[bool], None]] = []


@dataclass
class Calls:
    """One implementation's timed calls in one window: each one's time and whether the OS
    preempted the process while it ran."""

    ms: list[float] = field(default_factory=list)
    preempted: list[bool] = field(default_factory=list)

    def add(self, timed: Timed) -> None:
        self.ms.append(timed.ms)
        self.preempted.append(timed.preempted)

    @property
    def clean(self) -> int:
        return self.preempted.count(False)

    @property
    def spent_s(self) -> float:
        return sum(self.ms) / 1e3

    def stats(self) -> TimingStats:
        return summarize(self.ms, self.preempted)


@dataclass
class Measured:
    """What one timing window measured: each implementation's statistics and the machine."""

    stats: dict[str, TimingStats]
    load: WindowLoad


def time_stand_ins(
    job: WorkerJob, state: dict, window: Window, compiled: Callable | str | None
) -> Measured:
    """Eager (and the compiled baseline) timed with a copy of the reference in the
    candidate's place, with the same calls and checks around it as beside the candidate.

    ``alone``: before the candidate is imported, the baseline as nothing disturbed it.
    ``after``: once the candidate's timed calls are done. ``compiled``: the worker's one
    compiled baseline (``make_compiled``), as beside the candidate: its host path (guards, the
    wrapper) runs between eager's calls there too. A plain copy in its place made eager alone
    1.5x faster than beside an honest kernel on a 10-microsecond problem (H100); where it could
    not be compiled, a copy it is.
    """
    implementations: dict[str, Callable] = {
        "candidate": reference_copy(job, state),  # checked like a candidate, never judged
        "eager": reference_copy(job, state),
    }
    if isinstance(compiled, str):
        implementations["compiled"] = reference_copy(job, state)
    elif compiled is not None:
        implementations["compiled"] = compiled
    with torch.no_grad():
        if window == "alone":
            # The first timing loop of a fresh process ran its first fifth of calls 2-3x slower
            # than the rest on an H100 (lazy initialization, caches, clocks): a whole loop,
            # thrown away, brings the process to where the later loops find it.
            time_loop(job, implementations, TimedChecks(job, "settle"))
        measured = time_loop(job, implementations, TimedChecks(job, window))
    del measured.stats["candidate"]  # a stand-in, checked like a candidate, never judged
    return measured


def time_interleaved(
    job: WorkerJob,
    model: torch.nn.Module,
    state: dict,
    checks: list[Check],
    alone: Measured,
    compiled: Callable | str | None,
) -> CandidateReport:
    """Candidate, eager and compiled reference interleaved, then eager after; raises
    CheckFailed on a bad call. ``alone``: what ``time_stand_ins`` measured before, beside the
    same ``compiled``."""
    model.load_state_dict(state, strict=True)
    implementations: dict[str, Callable] = {"candidate": model, "eager": reference_copy(job, state)}
    timings = Timings(
        eager_alone=alone.stats["eager"],
        compiled_alone=alone.stats.get("compiled"),
        windows={"alone": alone.load},
    )
    if isinstance(compiled, str):  # the baseline's failure, not the candidate's: shown
        timings.compile_baseline_error = compiled
        timings.compiled_alone = None
    elif compiled is not None:
        implementations["compiled"] = compiled
    with torch.no_grad():
        before_timing = guards.snapshot(job.reference_ops)
        beside = time_loop(job, implementations, TimedChecks(job, "beside"))
        check_unpatched(job, before_timing, checks, "timing")
    after = time_stand_ins(job, state, "after", compiled)
    checks.append(
        Check(
            name="timed_outputs_correct",
            passed=True,
            detail=f"{beside.stats['candidate'].timed} timed calls on unforeseeable inputs, all "
            "re-checked",
        )
    )
    timings.candidate = beside.stats["candidate"]
    timings.eager_beside = beside.stats["eager"]
    timings.eager_after = after.stats["eager"]
    timings.compiled_beside = beside.stats.get("compiled")
    timings.windows |= {"beside": beside.load, "after": after.load}
    return CandidateReport(checks=checks, timings=timings)


def reference_copy(job: WorkerJob, state: dict) -> torch.nn.Module:
    reference = build_reference(job.problem, job.seeds[0])
    reference.load_state_dict(state)
    return reference


def time_loop(job: WorkerJob, implementations: dict, checks: TimedChecks) -> Measured:
    """Time ``implementations`` interleaved, every call checked by ``checks``, until each has
    its share (``timed_enough``) or ``max_reps`` calls; and measure the machine meanwhile."""
    problem, config = job.problem, job.config
    timer = Timer(problem.device)
    implementations = {
        name: bound(fn, problem.input_keywords) for name, fn in implementations.items()
    }
    for _ in range(config.warmup):
        inputs = _timing_inputs(job)
        for fn in implementations.values():
            fn(*inputs)
    for listener in WINDOW_LISTENERS:
        listener(True)
    try:
        return _timed_calls(job, implementations, checks, timer)
    finally:
        timer.close()
        for listener in WINDOW_LISTENERS:
            listener(False)


def _timed_calls(
    job: WorkerJob, implementations: dict, checks: TimedChecks, timer: Timer
) -> Measured:
    config, names = job.config, list(implementations)
    calls = {name: Calls() for name in names}
    meter = LoadMeter()
    for rep in range(config.max_reps):
        inputs = _timing_inputs(job)
        checks.before(inputs)
        # Who goes first rotates: on cpu, where no cache is flushed, the first call after the
        # inputs were made finds them in cache.
        shift = rep % len(names)
        results = {}
        with streams.timing_stream(job.problem.device, rep):
            for name in names[shift:] + names[:shift]:
                timed = timer(implementations[name], inputs)
                calls[name].add(timed)
                results[name] = timed.output
                if name == "candidate":
                    checks.after_candidate(rep, inputs, results[name])
        checks.against_eager(rep, results)
        if timed_enough(calls, config.min_reps, config.time_budget_s):
            break
    return Measured({name: calls[name].stats() for name in names}, meter.stop())


# The slowest implementation may take this many budgets before timing stops early: a candidate
# 1000x slower than eager would otherwise run until eager's budget is spent (or max_reps).
SLOWEST_BUDGETS = 10


def timed_enough(calls: dict[str, Calls], min_reps: int, budget_s: float) -> bool:
    """Stop timing? Every implementation has ``min_reps`` calls that ran undisturbed (preempted
    ones do not count: on a busy machine timing goes on for more), and either each has had its
    ``budget_s`` of timed work or the slowest has had ``SLOWEST_BUDGETS`` of them (which also
    ends the wait for undisturbed calls)."""
    spent = [c.spent_s for c in calls.values()]
    if max(spent) >= SLOWEST_BUDGETS * budget_s:
        return min(len(c.ms) for c in calls.values()) >= min_reps
    if min(c.clean for c in calls.values()) < min_reps:
        return False
    return min(spent) >= budget_s


def _timing_inputs(job: WorkerJob) -> list:
    """Inputs for one timed call, from a seed drawn now: no timed input is known in advance.

    They sit between guard regions as the checked inputs do, so a candidate cannot tell a
    timed call from a checked one by the inputs' storage.
    """
    inputs = make_inputs(job.problem, _SEEDS.randrange(1, 2**31 - 1), job.strengthened)
    return [guards.guarded(x) if isinstance(x, torch.Tensor) else x for x in inputs]


def make_compiled(job: WorkerJob, state: dict) -> Callable | str | None:
    """The worker's compiled baseline, made before anything is timed (compiling rewraps torch
    functions: the snapshots that timing is checked against are taken after it); why it could
    not be made; or None where ``eval.compile_baseline`` is off."""
    if not job.config.compile_baseline:
        return None
    with torch.no_grad():
        return compiled_baseline(job, reference_copy(job, state))


def compiled_baseline(job: WorkerJob, module: Callable) -> Callable | str:
    """``torch.compile(module)``, compiled by a first call; or why it could not be."""
    compiled = torch.compile(module)
    try:
        bound(compiled, job.problem.input_keywords)(*_timing_inputs(job))
    except Exception as err:  # the baseline's own failure, reported by the caller
        return _why_not_compiled(err)
    return compiled


def _why_not_compiled(err: Exception) -> str:
    """The error's start and, for a long one, its end: Inductor puts the compiler's command
    first and what the compiler said last."""
    text = f"{type(err).__name__}: {err}"
    if len(text) <= 2000:
        return text
    return f"{text[:400]}\n[...]\n{text[-1600:]}"
