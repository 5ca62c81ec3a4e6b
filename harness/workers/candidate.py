"""Candidate workers: build, check and time one untrusted candidate, each in its own process.

``evaluate`` (the checks): profile the reference (no candidate code in the process yet),
snapshot what a cheat would patch, import the candidate under the counting ``load_inline``,
construct it, run every case on guarded inputs over poisoned memory (each call profiled) and
hand the outputs to the parent for comparison.
``time`` (once the checks passed, in a fresh process where no profiler ran: a profiler
session leaves a process slower): time eager alone, import the candidate, time it interleaved
with the eager and compiled reference and eager after it (``harness.workers.timing``), and last
profile one more call, CUDA kernels included.
"""

from __future__ import annotations

import importlib.util
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils import cpp_extension
from torch.utils.flop_counter import FlopCounterMode

from harness.builds.cache import Builder, BuildFailed, CachedLoader
from harness.problem.cases import (
    build_reference,
    case_module,
    check_params,
    make_inputs,
)
from harness.problem.load import DTYPES
from harness.problem.user_code import init_arguments
from harness.records import Check, Status
from harness.sandbox.jobs import CandidateReport, CheckFailed, Go, WorkerJob
from harness.static.python import GateRejection
from harness.workers import guards, handover, profiling, streams
from harness.workers.calls import bound
from harness.workers.checked_case import harness_out_of_memory, pass_once, run_case
from harness.workers.stream_hold import StreamGate
from harness.workers.timed_checks import check_fresh, check_unpatched
from harness.workers.timing import (
    make_compiled,
    reference_copy,
    time_interleaved,
    time_stand_ins,
)

# How long a stream hold waits for the caller's stream (its joins let go) to finish the call's
# own work and the harness's reads, beyond the inputs' production: a margin and ten reference
# forwards. Passing it makes that hold inconclusive (a dependency the gate did not follow, or a
# held stream sharing a hardware queue with the caller's), and the next case is held instead.
HOLD_BASE_S = 1.0
HOLD_FORWARDS = 10


def load_candidate(
    job: WorkerJob, job_dir: Path, builder: Builder | None = None
) -> tuple[torch.nn.Module, CachedLoader]:
    """Import and construct ``ModelNew``; its kernels are built on the way, by ``builder``
    (the parent's, in a worker: the cache is read-only here)."""
    args, kwargs = init_arguments(job.problem)  # the user's code, before any candidate code
    loader = CachedLoader(job.cache_dir, job.problem.device, job.problem.dtype, builder=builder)
    cpp_extension.load_inline = loader  # type: ignore[assignment]
    path = job_dir / "candidate.py"
    path.write_text(job.candidate_source or "")
    try:
        spec = importlib.util.spec_from_file_location("kp_candidate", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["kp_candidate"] = module
        spec.loader.exec_module(module)
        model_class = module.ModelNew
        model = model_class(*args, **kwargs)
        model = model.to(device=job.problem.device, dtype=DTYPES[job.problem.dtype]).eval()
    except GateRejection as err:
        raise CheckFailed(Status.rejected, "static_gate", str(err)) from err
    except BuildFailed as err:
        raise CheckFailed(
            Status.build_error, "builds", "the kernel did not compile", str(err)
        ) from err
    except Exception as err:
        raise CheckFailed(
            Status.runtime_error,
            "constructs",
            f"{type(err).__name__}: {err}",
            traceback.format_exc(),
        ) from err
    return model, loader


def run_build(job: WorkerJob, job_dir: Path, builder: Builder) -> CandidateReport:
    try:
        _, loader = load_candidate(job, job_dir, builder)
    except CheckFailed as failure:
        return _failed(failure, [])
    return CandidateReport(
        checks=[Check(name="builds", passed=True, detail=f"{len(loader.builds)} extension(s)")]
    )


def run_evaluate(
    job: WorkerJob, job_dir: Path, proceed: Callable[[dict], bool], builder: Builder
) -> CandidateReport:
    """The checks. ``proceed(announcement)`` hands one case's outputs over
    (``harness.workers.handover``); the parent answers whether they were right: cases are compared
    one at a time, and the first wrong one ends the run."""
    transport = handover.transport_for(job.problem.device, job.recompute, job.config.sandbox)
    # The report's own list and dict are filled in place (pydantic copies what it is given).
    report = CandidateReport()
    checks, phases = report.checks, report.phase_seconds
    clock = _Clock(phases)
    gate = StreamGate.in_this_process()  # preloaded on cuda (harness.workers.stream_hold)
    base = build_reference(job.problem, job.seeds[0])  # the user's code, before any candidate's
    check_params(base, job.params_digest, job.problem)
    # The reference's ops, which the checks hold the candidate to (here and in its timing
    # worker), and its FLOPs, from one forward profiled before any candidate code is loaded;
    # and how long a forward takes, which bounds how long a stream hold waits for one.
    job.reference_ops, flops, forward_s = _profile_reference(job, base, timed=gate is not None)
    hold_limit_s = HOLD_BASE_S + HOLD_FORWARDS * forward_s
    clock.lap("reference_profile")
    report.flops, report.reference_ops = flops, job.reference_ops
    before = guards.snapshot(job.reference_ops)
    try:
        model, loader = load_candidate(job, job_dir, builder)
        clock.lap("build")
        checks.append(Check(name="static_gate", passed=True, detail="Python and kernel sources"))
        # The previous case's outputs stay alive: a buffer reused across calls shows.
        previous: list[torch.Tensor] = []
        hold_next = False
        for number, spec in enumerate(job.cases):
            # Busy-stream cases take turns at the two halves of stream order (harness.workers.streams):
            # other streams free, so work that does not wait for the inputs reads them too early;
            # other streams held, so work that the caller's stream does not wait for has not run
            # when the outputs are read. A hold that proved nothing is tried again.
            holding = hold_next and gate is not None and gate.usable()
            held = gate if spec.async_stream and holding else None
            try:
                produced = run_case(
                    job, model, loader, spec, case_module(base, spec), checks, held, hold_limit_s
                )
                if spec.async_stream:
                    hold_next = held is None or not held.last_conclusive
                check_fresh(produced, previous, spec.name)
                kept: list[torch.Tensor] = []  # copies the comparator reads: until it answered
                go = proceed(handover.send(produced, job_dir, number, transport, kept))
                del kept
            except torch.OutOfMemoryError as err:  # the candidate's own calls raise CheckFailed
                raise harness_out_of_memory(spec, job.problem.device, err) from err
            if not go:
                clock.lap("check")
                return report
            previous = produced
        pass_once(checks, "fresh_outputs", "each call returns newly allocated outputs")
        _check_gate(checks, gate)
        check_unpatched(job, before, checks, "import and correctness runs")
        clock.lap("check")
        return report
    except CheckFailed as failure:
        return _failed(failure, checks, phases)


def run_time(
    job: WorkerJob, job_dir: Path, builder: Builder, go: Callable[[], Go] | None = None
) -> CandidateReport:
    """The timing, in a process of its own. ``job.reference_ops``: what the checks' worker
    profiled; nothing is profiled here before the timing ends. A prestarted worker
    (``job.await_go``) gets them from ``go``, which returns once the checks passed: everything
    before it overlaps the checks, nothing after it does."""
    phases: dict[str, float] = {}
    clock = _Clock(phases)
    base = build_reference(job.problem, job.seeds[0])
    check_params(base, job.params_digest, job.problem)
    state = base.state_dict()
    compiled: Callable | str | None = None
    if not job.await_go or job.compile_before_go:
        compiled = make_compiled(job, state)
        clock.lap("compile")
    if job.await_go:
        if go is None:
            raise ValueError("a prestarted timing worker was given no way to wait for its go")
        job = job.model_copy(update={"reference_ops": go().reference_ops})
        clock.lap("waited")
        if compiled is None or isinstance(compiled, str):  # its first compile, or once more
            compiled = make_compiled(job, state)  # alone (a failure beside the checks: memory)
            clock.lap("compile")
    alone = time_stand_ins(job, state, "alone", compiled)
    clock.lap("eager_alone")
    before = guards.snapshot(job.reference_ops)
    checks: list[Check] = []
    try:
        model, _ = load_candidate(job, job_dir, builder)
        check_unpatched(job, before, checks, "import")
        clock.lap("load")
        report = time_interleaved(job, model, state, checks, alone, compiled)
        clock.lap("timing")
        # The full profile (CUDA kernels too) comes last: it profiles the calls after timing
        # as well, and any profiler session leaves the process slower (on cuda, CUPTI stays
        # attached unless kineto is told to tear it down): taken before timing, a CUDA one
        # made eager beside the candidate 1.6-2x slower than eager alone on an H100.
        _check_profile(job, model, report)
        report.baseline_breakdowns = _baseline_profiles(job, state, compiled, report.device_us)
        clock.lap("profile")
        report.phase_seconds = phases
        return report
    except CheckFailed as failure:
        return _failed(failure, checks, phases)


def _profile_reference(
    job: WorkerJob, base: torch.nn.Module, timed: bool
) -> tuple[list[str], int, float]:
    """The top-level aten ops and the matmul/conv FLOPs of a reference forward, and (``timed``:
    only a stream gate needs it) the wall time of one more."""
    inputs = make_inputs(job.problem, job.cases[0].seed, job.strengthened)
    forward = bound(base, job.problem.input_keywords)
    with torch.no_grad():
        ops = profiling.profile_forward(forward, inputs, job.problem.device, kernels=False)
        with FlopCounterMode(display=False) as counter:
            forward(*inputs)
        if not timed:
            return ops.aten_ops, int(counter.get_total_flops()), 0.0
        guards.settle(job.problem.device)
        started = time.perf_counter()
        forward(*inputs)
        if job.problem.device == "cuda":
            torch.cuda.synchronize()
        forward_s = time.perf_counter() - started
    return ops.aten_ops, int(counter.get_total_flops()), forward_s


def _check_gate(checks: list[Check], gate: StreamGate | None) -> None:
    """What the stream gate did, on the stream-order check's line; a candidate that kept every
    hold from testing it fails that check."""
    if gate is None:
        return
    reason = gate.unverifiable()
    if reason:
        checks[:] = [check for check in checks if check.name != "stream_ordered"]
        raise CheckFailed(
            Status.rejected, "stream_ordered", f"{reason}: {streams.STREAM_HINT}{gate.summary()}"
        )
    for check in checks:
        if check.name == "stream_ordered":
            check.detail += gate.summary()


class _Clock:
    """Laps of wall time, into ``phases``."""

    def __init__(self, phases: dict[str, float]) -> None:
        self.phases, self.last = phases, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = self.phases.get(name, 0.0) + now - self.last
        self.last = now


def _failed(
    failure: CheckFailed, checks: list[Check], phases: dict[str, float] | None = None
) -> CandidateReport:
    checks.append(Check(name=failure.check, passed=False, detail=failure.reason))
    return CandidateReport(
        status=failure.status,
        reason=failure.reason,
        log=failure.log,
        checks=checks,
        phase_seconds=phases or {},
    )


def _baseline_profiles(
    job: WorkerJob, state: dict, compiled: Callable | str | None, device_us: dict[str, float]
) -> dict[str, list[tuple[str, float]]]:
    """Where one call of eager and of the compiled baseline spends its time (kernels on cuda,
    operators on cpu), profiled after the timing like the candidate's: what a plan is up
    against. On cuda each one's device time goes into ``device_us`` too."""
    baselines: dict[str, Callable] = {"eager": reference_copy(job, state)}
    if callable(compiled):
        baselines["torch.compile"] = compiled
    inputs = make_inputs(job.problem, job.cases[0].seed, job.strengthened)
    found = {}
    with torch.no_grad():
        for name, fn in baselines.items():
            try:
                profile = profiling.profile_forward(
                    bound(fn, job.problem.input_keywords), inputs, job.problem.device
                )
            except Exception:  # a baseline's own failure: no breakdown of it, nothing judged
                continue
            found[name] = profile.breakdown
            if profile.device_us is not None:
                device_us[name] = profile.device_us
    return found


def _check_profile(job: WorkerJob, model, report: CandidateReport) -> None:
    """The last call, profiled (CUDA kernels too): no PyTorch compute beyond the reference's
    library ops; the kernels it launched (the parent checks one is its own, not the
    reference's); and where the call's time went, for the planner."""
    checks = report.checks
    inputs = make_inputs(job.problem, job.cases[0].seed, job.strengthened)
    with torch.no_grad():
        profile = profiling.profile_forward(
            bound(model, job.problem.input_keywords), inputs, job.problem.device
        )
    report.time_breakdown = profile.breakdown
    if profile.device_us is not None:
        report.device_us["kernelpilot"] = profile.device_us
    report.cuda_kernels = sorted(set(profile.cuda_kernels))
    problem = profiling.pytorch_compute_problems(profile.aten_ops, job.reference_ops)
    if problem:
        raise CheckFailed(Status.rejected, "no_pytorch_compute", problem)
    detail = f"PyTorch ops kept: {', '.join(sorted(set(profile.aten_ops))) or 'none'}"
    checks.append(Check(name="no_pytorch_compute", passed=True, detail=detail))
