"""Baseline worker: eager and ``torch.compile`` of the reference timed, with no candidate.

The nightly job measures each configured target that has no shipped kernel with it. It is the
timing worker's eager-alone measurement (``harness.workers.timing.time_stand_ins``): a copy of
the reference stands in the candidate's place, going through the same per-call checks, so
eager here sees the same work between its calls as eager beside a candidate (on a GPU a small
problem's host time depends on it). Eager and the compiled reference are timed interleaved,
each call on inputs drawn from a seed drawn at that moment, with the one timer, after one
whole loop thrown away.
"""

from __future__ import annotations

import time

from harness.problem.cases import build_reference, make_inputs
from harness.sandbox.jobs import BaselineReport, CompileReport, WorkerJob
from harness.workers.reference_forward import describe_inputs
from harness.workers.timing import make_compiled, time_stand_ins


def run_baseline(job: WorkerJob) -> BaselineReport:
    phases: dict[str, float] = {}
    started = time.perf_counter()
    state = build_reference(job.problem, job.seeds[0]).state_dict()
    # Where torch.compile fails, a plain copy takes its slot, so eager's surroundings do not
    # depend on whether it works tonight.
    compiled = make_compiled(job, state)
    phases["setup"] = time.perf_counter() - started
    timed = time_stand_ins(job, state, "alone", compiled)
    phases["timing"] = time.perf_counter() - started - phases["setup"]
    compile_error = compiled if isinstance(compiled, str) else None
    return BaselineReport(
        eager=timed.stats["eager"],
        compiled=timed.stats.get("compiled") if compile_error is None else None,
        window=timed.load,
        compile_baseline_error=compile_error,
        input_summary=describe_inputs(make_inputs(job.problem, job.seeds[0], job.strengthened)),
        phase_seconds=phases,
    )


def run_compile(job: WorkerJob) -> CompileReport:
    """``torch.compile`` of the reference, compiled as a timing worker compiles it (the same
    function, on inputs drawn the same way), so that its Inductor cache, this worker's
    ``TORCHINDUCTOR_CACHE_DIR``, holds what every candidate's timing worker compiles."""
    started = time.perf_counter()
    state = build_reference(job.problem, job.seeds[0]).state_dict()
    compiled = make_compiled(job, state)
    return CompileReport(
        error=compiled if isinstance(compiled, str) else "",
        phase_seconds={"compile": time.perf_counter() - started},
    )
