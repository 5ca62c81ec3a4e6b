"""The verdict on a candidate, from what its workers reported and what the trusted comparison
found: the status and reason, the checks in order, the own-kernel check, the baseline
disturbance and the speedups (``harness.judge.accept``'s pure rules). No process is run here.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.config import EvalConfig
from harness.errors import UserError
from harness.judge.accept import accept, baseline_disturbance
from harness.judge.busy import busy_windows, judged_timings, not_judged, quiet_detail
from harness.judge.comparator import ComparatorStopped
from harness.judge.tolerance import CaseComparison
from harness.problem.reference import ReferenceData
from harness.records import Check, Disturbance, EvalResult, Problem, Status
from harness.sandbox.jobs import CandidateReport, HarnessErrorReport, UserErrorReport
from harness.sandbox.run import WorkerOutcome


def checked_result(
    problem: Problem,
    config: EvalConfig,
    data: ReferenceData,
    report: CandidateReport,
    comparison: CaseComparison | None,
) -> EvalResult:
    """The verdict of the checks: the checks' worker's report and the trusted comparison of
    its outputs (``None``: there was none). ``ok`` here means: ready to be timed."""
    checks = list(report.checks)
    status, reason = report.status, report.reason
    if comparison is not None:
        checks[1:1] = comparison.checks
        # Outputs before a case that raised are compared too: wrong there comes first.
        failed_run = (None, Status.runtime_error, Status.harness_error)
        if comparison.failed is not None and status in failed_run:
            wrong = Status.runtime_error if comparison.stopped else Status.incorrect
            status, reason = wrong, comparison.failed
        elif comparison.compared < len(data.cases) and status is None:
            status = Status.runtime_error
            reason = f"outputs for {comparison.compared} of {len(data.cases)} cases"
    elif status is None:  # only the parent's own comparison can make a candidate correct
        status = Status.runtime_error
        reason = "the worker reported success without handing its outputs over for comparison"
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
        input_mode="strengthened" if data.report.strengthened else "as_given",
        seeds=data.seeds,
        phase_seconds=report.phase_seconds,
        io_bytes=data.report.io_bytes,
        input_summary=data.report.input_summary,
        copy_bandwidth_gbs=data.report.copy_bandwidth_gbs,
        flops=report.flops,
        matmul_tflops=data.report.matmul_tflops,
    )
    _network_check(result, report.network_isolated)
    return result


def timed_result(
    checked: EvalResult,
    report: CandidateReport,
    config: EvalConfig,
    reference_kernels: Callable[[], list[str]],
) -> EvalResult:
    """A checked candidate's verdict once its timing worker reported: the timing worker's
    checks (a later check of the same name stands in for the earlier one), its own-kernel
    check, the baseline disturbance and the speedups."""
    result = checked.model_copy(deep=True)
    network = next((c for c in result.checks if c.name == "network_isolated"), None)
    later = {check.name for check in report.checks}
    result.checks = [c for c in result.checks if c.name not in later and c is not network]
    result.checks += report.checks
    result.phase_seconds |= report.phase_seconds
    result.log = report.log or result.log
    status, reason = report.status, report.reason
    if status is None and report.cuda_kernels:
        status, reason = own_kernels(result.checks, report.cuda_kernels, reference_kernels)
    result.status, result.reason = status or Status.ok, reason
    result.timings = report.timings
    result.time_breakdown = report.time_breakdown
    result.baseline_breakdowns = report.baseline_breakdowns
    result.device_us = report.device_us
    if result.status is Status.ok:
        judge_timing(result, config)
    # Each worker that got as far as to check counts; a timing worker that died does not.
    found = [] if network is None else [network.passed]
    if report.network_isolated is not None:
        found.append(report.network_isolated)
    _network_check(result, all(found) if found else None)
    return result


def _network_check(result: EvalResult, isolated: bool | None) -> None:
    """The network check's line, where a worker got as far as to check (``None``: none did)."""
    if isolated is None:
        return
    detail = (
        "no network inside the workers"
        if isolated
        else "the OS did not allow a private network namespace"
    )
    result.checks.append(Check(name="network_isolated", passed=isolated, detail=detail))


def judge_timing(result: EvalResult, config: EvalConfig) -> None:
    """Whether the machine was quiet enough to judge, then the baseline-disturbance check,
    then speedups against the honest baselines."""
    if result.timings.candidate is None or result.timings.eager_beside is None:
        return
    busy = busy_windows(result.timings)
    result.timings = timings = judged_timings(result.timings)
    candidate, beside = timings.candidate, timings.eager_beside
    assert candidate is not None and beside is not None
    result.checks.append(
        Check(
            name="quiet_machine",
            passed=not busy,
            detail="; ".join(busy) if busy else quiet_detail(timings),
        )
    )
    if busy:
        result.status = Status.unjudged
        result.reason = not_judged(busy)
        return
    if timings.eager_alone is not None:
        disturbance = baseline_disturbance(beside, timings.eager_alone, timings.eager_after)
        detail = _describe(disturbance)
        result.checks.append(
            Check(name="baseline_undisturbed", passed=not disturbance.disturbed, detail=detail)
        )
        if disturbance.disturbed:
            result.status = Status.rejected
            result.reason = f"the candidate slows the baseline down: {detail}"
            return
    floor, review = config.noise_floor, config.review_speedup
    result.vs_eager = accept(candidate, timings.eager or beside, floor, review)
    if timings.compiled is not None:
        result.vs_compile = accept(candidate, timings.compiled, floor, review)


def _describe(disturbance: Disturbance) -> str:
    if disturbance.interleaved is None:
        return disturbance.lasting.describe("beside the candidate", "alone")
    return (
        f"{disturbance.lasting.describe('after the candidate', 'before it was loaded')}; "
        f"{disturbance.interleaved.describe('beside its calls', 'after them')}"
    )


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
    if results and results[0].kind == "user_error":
        raise UserError(**UserErrorReport.model_validate(results[0].body).model_dump())
    if results and results[0].kind == "harness_error":
        failure = HarnessErrorReport.model_validate(results[0].body)
        return CandidateReport(
            status=Status.harness_error, reason=failure.what, log=outcome.log_tail
        )
    if results:
        return CandidateReport.model_validate(results[0].body)
    if outcome.timed_out:
        return CandidateReport(
            status=Status.timeout, reason=f"no result after {timeout:.0f} s", log=outcome.log_tail
        )
    how = outcome.signal_name or f"exit code {outcome.returncode}"
    return CandidateReport(
        status=Status.runtime_error, reason=f"the worker died ({how})", log=outcome.log_tail
    )
