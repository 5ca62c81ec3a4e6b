"""Timing inside the candidate worker.

Eager is first timed alone, before any candidate code is loaded into the process. After the
correctness checks pass, the candidate, eager and ``torch.compile`` are timed interleaved on a
fresh input for every call, and every timed output is re-checked. The parent compares the two
eager measurements: a candidate that slows the baselines down shows up there, whatever it did.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from harness import guards
from harness.jobs import CandidateReport, CheckFailed, WorkerJob
from harness.problem import build_reference, make_inputs
from harness.records import Check, Status, TimingStats
from harness.timing import Timer, summarize
from harness.tolerance import compare, tolerance_for

RepCheck = Callable[[int, dict], None]


def time_eager_alone(job: WorkerJob, state: dict) -> TimingStats:
    """Eager timed before the candidate is imported: the baseline as nothing disturbed it."""
    samples: dict[str, list[float]] = {"eager": []}
    with torch.no_grad():
        _time_loop(job, {"eager": _reference(job, state)}, samples, check=None)
    return summarize(samples["eager"])


def time_interleaved(
    job: WorkerJob,
    model: torch.nn.Module,
    state: dict,
    checks: list[Check],
    eager_alone: TimingStats,
) -> CandidateReport:
    """Candidate, eager and compiled reference interleaved; raises CheckFailed on a bad call."""
    model.load_state_dict(state)
    implementations: dict[str, Callable] = {"candidate": model, "eager": _reference(job, state)}
    report = CandidateReport(eager_alone=eager_alone)
    with torch.no_grad():
        if job.config.compile_baseline:
            # Compiling rewraps torch functions; it runs before any timed candidate call, and
            # the snapshot that timing is checked against is taken after it.
            _warm_compiled(job, implementations, report)
        before_timing = guards.snapshot()
        samples: dict[str, list[float]] = {name: [] for name in implementations}
        _time_loop(job, implementations, samples, _timed_output_checks(job))
    check_unpatched(before_timing, checks, "timing")
    checks.append(
        Check(
            name="timed_outputs_correct",
            passed=True,
            detail=f"{len(samples['candidate'])} timed calls, fresh inputs each, all re-checked",
        )
    )
    report.checks = checks
    report.candidate = summarize(samples["candidate"])
    report.eager = summarize(samples["eager"])
    if "compiled" in samples:
        report.compiled = summarize(samples["compiled"])
    return report


def check_unpatched(before: dict[str, int], checks: list[Check], when: str) -> None:
    """Fail when a function or setting of torch, the timers or the harness changed."""
    patched = guards.changed(before, guards.snapshot())
    if patched:
        raise CheckFailed(
            Status.rejected, "no_monkeypatching", f"changed during {when}: {', '.join(patched[:8])}"
        )
    checks[:] = [check for check in checks if check.name != "no_monkeypatching"]
    checks.append(
        Check(name="no_monkeypatching", passed=True, detail="torch, timer and builtins intact")
    )


def _reference(job: WorkerJob, state: dict) -> torch.nn.Module:
    reference = build_reference(job.problem, job.seeds[0])
    reference.load_state_dict(state)
    return reference


def _time_loop(
    job: WorkerJob, implementations: dict, samples: dict[str, list[float]], check: RepCheck | None
) -> None:
    problem, config = job.problem, job.config
    timer = Timer(problem.device)
    names = list(implementations)
    for number in range(config.warmup):
        inputs = make_inputs(problem, job.timing_seed + 1 + number, job.strengthened)
        for fn in implementations.values():
            fn(*inputs)
    for rep in range(config.max_reps):
        inputs = make_inputs(problem, job.timing_seed + 1 + config.warmup + rep, job.strengthened)
        # Who goes first rotates: on cpu, where no cache is flushed, the first call after the
        # inputs were made finds them in cache.
        shift = rep % len(names)
        results = {}
        for name in names[shift:] + names[:shift]:
            elapsed, results[name] = timer(implementations[name], inputs)
            samples[name].append(elapsed)
        if check is not None:
            check(rep, results)
        spent = min(sum(values) for values in samples.values()) / 1e3
        if rep + 1 >= config.min_reps and spent >= config.time_budget_s:
            break


def _warm_compiled(job: WorkerJob, implementations: dict, report: CandidateReport) -> None:
    compiled = torch.compile(implementations["eager"])
    try:
        compiled(*make_inputs(job.problem, job.timing_seed, job.strengthened))
    except Exception as err:  # the baseline, not the candidate: recorded and shown, never hidden
        report.compile_baseline_error = f"{type(err).__name__}: {str(err)[:300]}"
        return
    implementations["compiled"] = compiled


def _timed_output_checks(job: WorkerJob) -> RepCheck:
    """Every timed candidate output: a plain tensor, right, and not the previous call's memory."""
    tol = tolerance_for(job.problem.dtype, job.problem.atol, job.problem.rtol)
    previous: list[torch.Tensor] = []  # kept alive, so its memory cannot be handed out again

    def check(rep: int, results: dict) -> None:
        outputs, expected = _as_list(results["candidate"]), _as_list(results["eager"])
        for out, ref in zip(outputs, expected, strict=True):
            if type(out) is not torch.Tensor:
                raise CheckFailed(
                    Status.rejected,
                    "plain_tensor_outputs",
                    f"timed call {rep}: output is {type(out).__name__}",
                )
            result = compare(out, ref, tol)
            if not result.passed:
                raise CheckFailed(
                    Status.incorrect, "timed_outputs_correct", f"timed call {rep}: {result.detail}"
                )
        check_fresh(outputs, previous, f"timed call {rep}")
        previous[:] = outputs

    return check


def check_fresh(outputs: list, previous: list, where: str) -> None:
    """Outputs must not reuse the memory of the previous call's outputs, still held here.

    A module that hands out the same buffer every call overwrites results its caller still
    holds, and skips the allocation that the reference pays for.
    """
    if any(guards.overlaps(out, old) for out in outputs for old in previous):
        raise CheckFailed(
            Status.incorrect,
            "fresh_outputs",
            f"{where}: an output shares memory with the previous call's output "
            "(one buffer reused across calls overwrites results the caller still holds)",
        )


def _as_list(value) -> list:
    return list(value) if isinstance(value, list | tuple) else [value]
