"""Baseline worker: eager and ``torch.compile`` of the reference timed, with no candidate.

The nightly job measures each configured target that has no shipped kernel with it. The loop
is the candidate worker's (``harness.worker_timing``), set up as it is for eager timed alone:
a copy of the reference stands in the candidate's place, going through the same per-call
checks, so eager here sees the same work between its calls as eager beside a candidate (on a
GPU a small problem's host time depends on it). Eager and the compiled reference are timed
interleaved, each call on inputs drawn from a seed drawn at that moment, with the one timer.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from harness.cases import build_reference, make_inputs
from harness.jobs import BaselineReport, WorkerJob
from harness.timed_checks import TimedChecks
from harness.timing import summarize
from harness.worker_reference import describe_inputs
from harness.worker_timing import compiled_baseline, time_loop


def run_baseline(job: WorkerJob) -> BaselineReport:
    phases: dict[str, float] = {}
    started = time.perf_counter()
    base = build_reference(job.problem, job.seeds[0])
    state = base.state_dict()
    implementations: dict[str, Callable] = {
        "candidate": _copy(job, state),  # a stand-in: checked like a candidate, never judged
        "eager": base,
    }
    compile_error = None
    if job.config.compile_baseline:
        compiled = compiled_baseline(job, base)
        if isinstance(compiled, str):
            # A plain copy takes its place, so eager's surroundings do not depend on whether
            # torch.compile works tonight.
            compile_error, compiled = compiled, _copy(job, state)
        implementations["compiled"] = compiled
    phases["setup"] = time.perf_counter() - started
    samples: dict[str, list[float]] = {name: [] for name in implementations}
    with torch.no_grad():
        time_loop(job, implementations, samples, TimedChecks(job, "alone"))
    phases["timing"] = time.perf_counter() - started - phases["setup"]
    return BaselineReport(
        eager=summarize(samples["eager"]),
        compiled=summarize(samples["compiled"])
        if "compiled" in samples and compile_error is None
        else None,
        compile_baseline_error=compile_error,
        input_summary=describe_inputs(make_inputs(job.problem, job.seeds[0], job.strengthened)),
        phase_seconds=phases,
    )


def _copy(job: WorkerJob, state: dict) -> torch.nn.Module:
    reference = build_reference(job.problem, job.seeds[0])
    reference.load_state_dict(state)
    return reference
