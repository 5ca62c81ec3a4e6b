"""Candidate worker: builds, checks and times one untrusted candidate in its own process.

Order of work: snapshot what a cheat would patch, import the candidate under the counting
``load_inline``, construct it, run every case on guarded inputs over poisoned memory, hand the
outputs to the parent for comparison, then (if the parent says so) time it interleaved with the
eager and compiled reference on fresh inputs, re-checking every timed output.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity
from torch.utils import cpp_extension

from harness import guards
from harness.buildcache import BuildFailed, CachedLoader
from harness.gate import GateRejection
from harness.jobs import CandidateReport, WorkerJob
from harness.problem import DTYPES, build_reference, init_arguments, make_inputs
from harness.records import Check, Status
from harness.timing import Timer, summarize
from harness.tolerance import compare, tolerance_for


class Verdict(Exception):
    """A failed check: ends the candidate's evaluation with a status."""

    def __init__(self, status: Status, check: str, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.status, self.check, self.reason, self.log = status, check, reason, log


def load_candidate(job: WorkerJob, job_dir: Path) -> tuple[torch.nn.Module, CachedLoader]:
    """Import and construct ``ModelNew``; builds its kernels on the way."""
    args, kwargs = init_arguments(job.problem)  # the user's code, before any candidate code
    loader = CachedLoader(job.cache_dir, job.problem.device, job.problem.dtype)
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
        raise Verdict(Status.rejected, "static_gate", str(err)) from err
    except BuildFailed as err:
        raise Verdict(Status.build_error, "builds", "the kernel did not compile", str(err)) from err
    except Exception as err:
        raise Verdict(
            Status.runtime_error,
            "constructs",
            f"{type(err).__name__}: {err}",
            traceback.format_exc(),
        ) from err
    return model, loader


def run_build(job: WorkerJob, job_dir: Path) -> CandidateReport:
    try:
        _, loader = load_candidate(job, job_dir)
    except Verdict as verdict:
        return _failed(verdict, [])
    return CandidateReport(
        checks=[Check(name="builds", passed=True, detail=f"{len(loader.builds)} extension(s)")]
    )


def run_evaluate(job: WorkerJob, job_dir: Path, proceed) -> CandidateReport:
    """``proceed()`` asks the parent whether the outputs were right, before timing starts."""
    data = torch.load(job_dir / "inputs.pt", weights_only=True)
    (job_dir / "inputs.pt").unlink()  # nothing the candidate could read back
    before = guards.snapshot()
    checks: list[Check] = []
    try:
        model, loader = load_candidate(job, job_dir)
        checks.append(Check(name="static_gate", passed=True, detail="Python and kernel sources"))
        outputs = [_run_case(job, model, loader, case, checks) for case in data["cases"]]
        _check_profile(job, model, data["cases"][0], checks)
        _check_snapshot(before, checks, "import and correctness runs")
        torch.save({"outputs": outputs}, job_dir / "outputs.pt")
        if not proceed():
            return CandidateReport(checks=checks)
        return _time(job, model, data["cases"][0], checks)
    except Verdict as verdict:
        return _failed(verdict, checks)


def _failed(verdict: Verdict, checks: list[Check]) -> CandidateReport:
    checks.append(Check(name=verdict.check, passed=False, detail=verdict.reason))
    return CandidateReport(
        status=verdict.status, reason=verdict.reason, log=verdict.log, checks=checks
    )


def _pass_once(checks: list[Check], name: str, detail: str) -> None:
    if not any(check.name == name for check in checks):
        checks.append(Check(name=name, passed=True, detail=detail))


def _run_case(job: WorkerJob, model, loader: CachedLoader, case: dict, checks: list[Check]) -> list:
    device = job.problem.device
    try:
        model.load_state_dict(case["state"], strict=True)
    except Exception as err:
        raise Verdict(
            Status.runtime_error, "state_dict_strict", f"load_state_dict(strict=True): {err}"
        ) from err
    _pass_once(checks, "state_dict_strict", "loads the reference's parameters")
    inputs = [
        guards.guarded(x.to(device)) if isinstance(x, torch.Tensor) else x for x in case["inputs"]
    ]
    originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    guards.poison_memory(case["output_meta"], device)
    loader.calls.clear()
    # Every checked call is profiled (CPU ops only: that adds no synchronization), so a
    # PyTorch fallback taken on some shapes or seeds only is seen too.
    with torch.no_grad(), torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof:
        try:
            with torch.profiler.record_function(guards.FORWARD_RANGE):
                result = model(*inputs)
        except Exception as err:
            raise Verdict(
                Status.runtime_error,
                "runs",
                f"{case['name']}: {type(err).__name__}: {err}",
                traceback.format_exc(),
            ) from err
        outputs = result if isinstance(result, list | tuple) else [result]
        if not all(type(out) is torch.Tensor for out in outputs):
            kinds = ", ".join(type(out).__name__ for out in outputs)
            raise Verdict(
                Status.rejected, "plain_tensor_outputs", f"outputs are {kinds}, not plain tensors"
            )
        at_return = guards.fingerprint(outputs)
    computes = guards.pytorch_compute_problems(guards.forward_ops(prof), job.reference_ops)
    if computes:
        raise Verdict(Status.rejected, "no_pytorch_compute", f"{case['name']}: {computes}")
    guards.settle(device)
    if guards.fingerprint(outputs) != at_return:
        raise Verdict(
            Status.incorrect,
            "stable_after_sync",
            f"{case['name']}: outputs changed after return (work deferred past the return)",
        )
    if not sum(loader.calls.values()):
        raise Verdict(
            Status.rejected, "launches_own_kernel", "forward never called its compiled kernel"
        )
    for out in outputs:
        if any(isinstance(x, torch.Tensor) and guards.overlaps(out, x) for x in inputs):
            raise Verdict(
                Status.incorrect, "no_input_alias", "an output shares memory with an input"
            )
    for position, (now, then) in enumerate(zip(inputs, originals, strict=True)):
        if isinstance(now, torch.Tensor) and not _same(now, then, guarded_storage=True):
            raise Verdict(Status.incorrect, "inputs_unchanged", f"input {position} was modified")
    for name, detail in [
        ("plain_tensor_outputs", "outputs are torch.Tensor"),
        ("stable_after_sync", "outputs unchanged after synchronize"),
        ("launches_own_kernel", "its compiled functions are called in every forward"),
        ("no_input_alias", "outputs do not alias inputs"),
        ("inputs_unchanged", "inputs and their guard regions untouched"),
    ]:
        _pass_once(checks, name, detail)
    return [out.detach().cpu().clone() for out in outputs]


def _same(now: torch.Tensor, then: torch.Tensor, guarded_storage: bool) -> bool:
    if not torch.equal(now, then) and not bool(
        ((now == then) | (now.isnan() & then.isnan())).all()
    ):
        return False
    if guarded_storage:  # out-of-bounds writes land in the guard regions around the input
        raw = torch.tensor([], dtype=now.dtype, device=now.device).set_(now.untyped_storage())
        head, tail = raw[: guards.GUARD_ELEMENTS], raw[guards.GUARD_ELEMENTS + now.numel() :]
        for region in (head, tail):
            intact = region.isnan() if now.is_floating_point() else region == guards.guard_fill(now)
            if not bool(intact.all()):
                return False
    return True


def _check_profile(job: WorkerJob, model, case: dict, checks: list[Check]) -> None:
    inputs = [
        x.to(job.problem.device) if isinstance(x, torch.Tensor) else x for x in case["inputs"]
    ]
    with torch.no_grad():
        profile = guards.profile_forward(model, inputs, job.problem.device)
    problem = guards.pytorch_compute_problems(profile.aten_ops, job.reference_ops)
    if problem:
        raise Verdict(Status.rejected, "no_pytorch_compute", problem)
    detail = f"PyTorch ops kept: {', '.join(sorted(set(profile.aten_ops))) or 'none'}"
    if job.problem.device == "cuda":
        own = sorted(set(profile.cuda_kernels) - set(job.reference_kernels))
        if profile.cuda_kernels and not own:
            raise Verdict(
                Status.rejected,
                "launches_own_kernel",
                "the profiler saw only kernels the reference also launches",
            )
        detail += f"; own CUDA kernels: {', '.join(own)[:200] or 'profiler saw none'}"
    checks.append(Check(name="no_pytorch_compute", passed=True, detail=detail))


def _check_snapshot(before: dict[str, int], checks: list[Check], when: str) -> None:
    patched = guards.changed(before, guards.snapshot())
    if patched:
        raise Verdict(
            Status.rejected, "no_monkeypatching", f"changed during {when}: {', '.join(patched[:8])}"
        )
    checks[:] = [check for check in checks if check.name != "no_monkeypatching"]
    checks.append(
        Check(name="no_monkeypatching", passed=True, detail="torch, timer and builtins intact")
    )


def _time(job: WorkerJob, model, case: dict, checks: list[Check]) -> CandidateReport:
    problem, config = job.problem, job.config
    reference = build_reference(problem, job.seeds[0])
    reference.load_state_dict(case["state"])
    model.load_state_dict(case["state"])
    implementations = {"candidate": model, "eager": reference}
    report = CandidateReport()
    with torch.no_grad():
        if config.compile_baseline:
            # Compiling rewraps torch functions; it runs before any timed candidate call, and
            # the snapshot that timing is checked against is taken after it.
            _warm_compiled(
                reference,
                make_inputs(problem, job.timing_seed, job.strengthened),
                implementations,
                report,
            )
        before_timing = guards.snapshot()
        samples: dict[str, list[float]] = {name: [] for name in implementations}
        _time_loop(job, implementations, samples)
    _check_snapshot(before_timing, checks, "timing")
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


def _time_loop(job: WorkerJob, implementations: dict, samples: dict[str, list[float]]) -> None:
    problem, config = job.problem, job.config
    tol = tolerance_for(problem.dtype, problem.atol, problem.rtol)
    timer = Timer(problem.device)
    for number in range(config.warmup):
        inputs = make_inputs(problem, job.timing_seed + 1 + number, job.strengthened)
        for fn in implementations.values():
            fn(*inputs)
    for rep in range(config.max_reps):
        inputs = make_inputs(problem, job.timing_seed + 1 + config.warmup + rep, job.strengthened)
        results = {}
        for name, fn in implementations.items():
            elapsed, results[name] = timer(fn, inputs)
            samples[name].append(elapsed)
        _check_timed(results["candidate"], results["eager"], tol, rep)
        spent = min(sum(values) for values in samples.values()) / 1e3
        if rep + 1 >= config.min_reps and spent >= config.time_budget_s:
            break


def _warm_compiled(reference, inputs: list, implementations: dict, report: CandidateReport) -> None:
    compiled = torch.compile(reference)
    try:
        compiled(*inputs)
    except Exception as err:  # the baseline, not the candidate: recorded and shown, never hidden
        report.compile_baseline_error = f"{type(err).__name__}: {str(err)[:300]}"
        return
    implementations["compiled"] = compiled


def _check_timed(candidate_out, eager_out, tol, rep: int) -> None:
    candidate_list = candidate_out if isinstance(candidate_out, list | tuple) else [candidate_out]
    eager_list = eager_out if isinstance(eager_out, list | tuple) else [eager_out]
    for out, ref in zip(candidate_list, eager_list, strict=True):
        if type(out) is not torch.Tensor:
            raise Verdict(
                Status.rejected,
                "plain_tensor_outputs",
                f"timed call {rep}: output is {type(out).__name__}",
            )
        result = compare(out, ref, tol)
        if not result.passed:
            raise Verdict(
                Status.incorrect, "timed_outputs_correct", f"timed call {rep}: {result.detail}"
            )
