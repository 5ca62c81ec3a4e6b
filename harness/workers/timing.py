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

import torch

from harness.problem.cases import build_reference, make_inputs
from harness.records import Check, Timings, TimingStats
from harness.sandbox.jobs import CandidateReport, WorkerJob
from harness.workers import guards, streams
from harness.workers.calls import bound
from harness.workers.timed_checks import TimedChecks, Window, check_unpatched
from harness.workers.timers import Timer, summarize

_SEEDS = random.SystemRandom()


def time_stand_ins(
    job: WorkerJob, state: dict, window: Window, compiled: Callable | str | None
) -> dict[str, TimingStats]:
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
        "candidate": _reference(job, state),  # checked like a candidate, never judged
        "eager": _reference(job, state),
    }
    if isinstance(compiled, str):
        implementations["compiled"] = _reference(job, state)
    elif compiled is not None:
        implementations["compiled"] = compiled
    samples: dict[str, list[float]] = {name: [] for name in implementations}
    with torch.no_grad():
        if window == "alone":
            # The first timing loop of a fresh process ran its first fifth of calls 2-3x slower
            # than the rest on an H100 (lazy initialization, caches, clocks): a whole loop,
            # thrown away, brings the process to where the later loops find it.
            time_loop(
                job,
                implementations,
                {name: [] for name in implementations},
                TimedChecks(job, "settle"),
            )
        time_loop(job, implementations, samples, TimedChecks(job, window))
    return {name: summarize(samples[name]) for name in implementations if name != "candidate"}


def time_interleaved(
    job: WorkerJob,
    model: torch.nn.Module,
    state: dict,
    checks: list[Check],
    alone: dict[str, TimingStats],
    compiled: Callable | str | None,
) -> CandidateReport:
    """Candidate, eager and compiled reference interleaved, then eager after; raises
    CheckFailed on a bad call. ``alone``: what ``time_stand_ins`` measured before, beside the
    same ``compiled``."""
    model.load_state_dict(state, strict=True)
    implementations: dict[str, Callable] = {"candidate": model, "eager": _reference(job, state)}
    timings = Timings(eager_alone=alone["eager"], compiled_alone=alone.get("compiled"))
    if isinstance(compiled, str):  # the baseline's failure, not the candidate's: shown
        timings.compile_baseline_error = compiled
        timings.compiled_alone = None
    elif compiled is not None:
        implementations["compiled"] = compiled
    with torch.no_grad():
        before_timing = guards.snapshot(job.reference_ops)
        samples: dict[str, list[float]] = {name: [] for name in implementations}
        time_loop(job, implementations, samples, TimedChecks(job, "beside"))
        check_unpatched(job, before_timing, checks, "timing")
    after = time_stand_ins(job, state, "after", compiled)
    checks.append(
        Check(
            name="timed_outputs_correct",
            passed=True,
            detail=f"{len(samples['candidate'])} timed calls on unforeseeable inputs, all "
            "re-checked",
        )
    )
    timings.candidate = summarize(samples["candidate"])
    timings.eager_beside = summarize(samples["eager"])
    timings.eager_after = after["eager"]
    if "compiled" in samples:
        timings.compiled_beside = summarize(samples["compiled"])
    return CandidateReport(checks=checks, timings=timings)


def _reference(job: WorkerJob, state: dict) -> torch.nn.Module:
    reference = build_reference(job.problem, job.seeds[0])
    reference.load_state_dict(state)
    return reference


def time_loop(
    job: WorkerJob,
    implementations: dict,
    samples: dict[str, list[float]],
    checks: TimedChecks,
) -> None:
    problem, config = job.problem, job.config
    timer = Timer(problem.device)
    implementations = {
        name: bound(fn, problem.input_keywords) for name, fn in implementations.items()
    }
    names = list(implementations)
    for _ in range(config.warmup):
        inputs = _timing_inputs(job)
        for fn in implementations.values():
            fn(*inputs)
    for rep in range(config.max_reps):
        inputs = _timing_inputs(job)
        checks.before(inputs)
        # Who goes first rotates: on cpu, where no cache is flushed, the first call after the
        # inputs were made finds them in cache.
        shift = rep % len(names)
        results = {}
        with streams.timing_stream(problem.device, rep):
            for name in names[shift:] + names[:shift]:
                elapsed, results[name] = timer(implementations[name], inputs)
                samples[name].append(elapsed)
                if name == "candidate":
                    checks.after_candidate(rep, inputs, results[name])
        checks.against_eager(rep, results)
        if timed_enough(rep + 1, samples, config.min_reps, config.time_budget_s):
            break


# The slowest implementation may take this many budgets before timing stops early: a candidate
# 1000x slower than eager would otherwise run until eager's budget is spent (or max_reps).
SLOWEST_BUDGETS = 10


def timed_enough(
    reps: int, samples: dict[str, list[float]], min_reps: int, budget_s: float
) -> bool:
    """Stop timing? Every implementation has ``min_reps`` calls, and either each has had its
    ``budget_s`` of timed work or the slowest has had ``SLOWEST_BUDGETS`` of them."""
    if reps < min_reps:
        return False
    spent = [sum(values) / 1e3 for values in samples.values()]
    return min(spent) >= budget_s or max(spent) >= SLOWEST_BUDGETS * budget_s


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
        return compiled_baseline(job, _reference(job, state))


def compiled_baseline(job: WorkerJob, module: Callable) -> Callable | str:
    """``torch.compile(module)``, compiled by a first call; or why it could not be."""
    compiled = torch.compile(module)
    try:
        bound(compiled, job.problem.input_keywords)(*_timing_inputs(job))
    except Exception as err:  # the baseline's own failure, reported by the caller
        return f"{type(err).__name__}: {str(err)[:300]}"
    return compiled
