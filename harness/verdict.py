"""The verdict on a candidate, from what its worker reported and what the trusted comparison
found: the status and reason, the checks in order, the own-kernel check, the baseline
disturbance and the speedups (``harness.accept``'s pure rules). No process is run here.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.accept import accept, baseline_disturbance, honest_baseline
from harness.comparator import ComparatorStopped
from harness.config import EvalConfig
from harness.errors import UserError
from harness.jobs import CandidateReport
from harness.records import Check, EvalResult, Problem, Status
from harness.reference import ReferenceData
from harness.sandbox import WorkerOutcome
from harness.tolerance import CaseComparison


def eval_result(
    problem: Problem,
    config: EvalConfig,
    data: ReferenceData,
    report: CandidateReport,
    comparison: CaseComparison | None,
    reference_kernels: Callable[[], list[str]],
) -> EvalResult:
    """The verdict on one candidate: its worker's report, the trusted comparison of its
    outputs (``None``: there was none), its own-kernel check, then its timing."""
    checks = list(report.checks)
    status, reason = report.status, report.reason
    if comparison is not None:
        checks[1:1] = comparison.checks
        # Outputs before a case that raised are compared too: wrong there comes first.
        if comparison.failed is not None and status in (None, Status.runtime_error):
            wrong = Status.runtime_error if comparison.stopped else Status.incorrect
            status, reason = wrong, comparison.failed
        elif comparison.compared < len(data.cases) and status is None:
            status = Status.runtime_error
            reason = f"outputs for {comparison.compared} of {len(data.cases)} cases"
    elif status is None:  # only the parent's own comparison can make a candidate correct
        status = Status.runtime_error
        reason = "the worker reported success without handing its outputs over for comparison"
    if status is None and report.cuda_kernels:
        status, reason = own_kernels(checks, report.cuda_kernels, reference_kernels)
    result = EvalResult(
        status=status or Status.ok,
        reason=reason,
        log=report.log,
        checks=checks,
        device=problem.device,
        device_name=report.device_name,
        torch_version=report.torch_version,
        max_abs_error=comparison.max_abs_error if comparison else None,
        rel_error=comparison.rel_error if comparison else None,
        eager=report.eager,
        eager_alone=report.eager_alone,
        compiled=report.compiled,
        candidate=report.candidate,
        compile_baseline_error=report.compile_baseline_error,
        input_mode="strengthened" if data.report.strengthened else "as_given",
        seeds=data.seeds,
        phase_seconds=report.phase_seconds,
        time_breakdown=report.time_breakdown,
        io_bytes=data.report.io_bytes,
        input_summary=data.report.input_summary,
        copy_bandwidth_gbs=data.report.copy_bandwidth_gbs,
        flops=report.flops,
        matmul_tflops=data.report.matmul_tflops,
    )
    if result.status is Status.ok:
        judge_timing(result, config)
    result.checks.append(
        Check(
            name="network_isolated",
            passed=report.network_isolated,
            detail="no network inside the worker"
            if report.network_isolated
            else "the OS did not allow a private network namespace",
        )
    )
    return result

def judge_timing(result: EvalResult, config: EvalConfig) -> None:
    """The baseline-disturbance check, then speedups against the honest baselines."""
    candidate, eager = result.candidate, result.eager
    if candidate is None or eager is None:
        return
    if result.eager_alone is not None:
        disturbance = baseline_disturbance(eager, result.eager_alone)
        detail = (
            f"eager beside the candidate took {disturbance.ratio:.2f}x its time alone "
            f"(fastest call: {disturbance.fastest_ratio:.2f}x; allowed: "
            f"{disturbance.allowed:.2f}x)"
        )
        result.checks.append(
            Check(name="baseline_undisturbed", passed=not disturbance.disturbed, detail=detail)
        )
        if disturbance.disturbed:
            result.status = Status.rejected
            result.reason = f"the candidate slows the baseline down: {detail}"
            return
    floor, review = config.noise_floor, config.review_speedup
    result.vs_eager = accept(
        candidate, honest_baseline(eager, result.eager_alone), floor, review
    )
    if result.compiled:
        result.vs_compile = accept(candidate, result.compiled, floor, review)


def own_kernels(
    checks: list[Check], launched: list[str], reference_kernels: Callable[[], list[str]]
) -> tuple[Status | None, str]:
    """Whether the candidate's profiled call launched a CUDA kernel of its own, one the
    reference does not launch (its kernels profiled once per problem, asked for only here)."""
    try:
        own = sorted(set(launched) - set(reference_kernels()))
    except ComparatorStopped as err:
        return Status.runtime_error, f"the reference's kernels could not be profiled: {err}"
    kept = [check for check in checks if check.name != "launches_own_kernel"]
    if own:
        detail = f"own CUDA kernels: {', '.join(own)[:200]}"
        checks[:] = [*kept, Check(name="launches_own_kernel", passed=True, detail=detail)]
        return None, ""
    detail = "the profiler saw only kernels the reference also launches"
    checks[:] = [*kept, Check(name="launches_own_kernel", passed=False, detail=detail)]
    return Status.rejected, detail


def candidate_report(outcome: WorkerOutcome, problem: Problem, timeout: float) -> CandidateReport:
    """The worker's one result from its channel, or why there is none."""
    results = outcome.results()
    if len(results) > 1 or outcome.channel_error:
        return CandidateReport(
            status=Status.rejected,
            reason=outcome.channel_error or "the worker's channel carried more than one result",
            log=outcome.log_tail,
        )
    if results and results[0]["kind"] == "user_error":
        raise UserError(**results[0]["body"])
    if results:
        return CandidateReport.model_validate(results[0]["body"])
    if outcome.timed_out:
        return CandidateReport(
            status=Status.timeout, reason=f"no result after {timeout:.0f} s", log=outcome.log_tail
        )
    how = outcome.signal_name or f"exit code {outcome.returncode}"
    return CandidateReport(
        status=Status.runtime_error, reason=f"the worker died ({how})", log=outcome.log_tail
    )
