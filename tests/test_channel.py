"""The worker's report channel: one result, over a pipe, and never ok without the parent's own
comparison. A candidate's process cannot forge or rewrite a verdict after its checks."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

from harness.evaluate import Evaluator
from harness.judge.tolerance import CaseComparison
from harness.judge.verdict import candidate_report, checked_result, timed_result
from harness.problem.load import problem_from_target
from harness.problem.reference import ReferenceData, reference_data
from harness.records import AuditReport, Status
from harness.sandbox.channel import ChannelReader
from harness.sandbox.jobs import CandidateReport, ReferenceReport
from harness.sandbox.run import WorkerOutcome
from tests.conftest import FIXTURES, fast_config


def outcome(*messages: dict, **fields) -> WorkerOutcome:
    settings = {"returncode": 0, "timed_out": False, "seconds": 1.0, "log_tail": ""}
    settings.update(fields)
    return WorkerOutcome(messages=list(messages), **settings)


def report_message(**fields) -> dict:
    return {"kind": "report", "body": CandidateReport(**fields).model_dump(mode="json")}


PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")


def test_one_result_is_the_report():
    got = candidate_report(outcome({"kind": "outputs"}, report_message(reason="x")), PROBLEM, 9)
    assert got.status is None and got.reason == "x"


def test_two_results_mean_a_tampered_channel():
    forged = outcome(report_message(), report_message())
    assert candidate_report(forged, PROBLEM, 9).status is Status.rejected


def test_an_unreadable_channel_is_rejected():
    got = candidate_report(outcome(channel_error="not JSON"), PROBLEM, 9)
    assert got.status is Status.rejected and "not JSON" in got.reason


def test_no_result_is_a_dead_worker_or_a_timeout():
    died = candidate_report(outcome(returncode=-11, signal_name="SIGSEGV"), PROBLEM, 9)
    assert died.status is Status.runtime_error and "SIGSEGV" in died.reason
    slow = candidate_report(outcome(returncode=-9, timed_out=True), PROBLEM, 9)
    assert slow.status is Status.timeout


def test_a_harness_error_is_kernelpilots_and_counts_as_a_result():
    """kernelpilot's own failure in the worker (``harness.sandbox.blame``) is no verdict on the
    candidate; sent beside a report, it is a second result: a tampered channel."""
    said = {"kind": "harness_error", "body": {"what": "kernelpilot failed (...): TypeError: x"}}
    got = candidate_report(outcome(said, returncode=3, log_tail="Traceback ..."), PROBLEM, 9)
    assert got.status is Status.harness_error and got.reason.endswith("TypeError: x")
    assert got.log == "Traceback ..."
    assert candidate_report(outcome(said, report_message()), PROBLEM, 9).status is Status.rejected


def test_no_network_line_for_a_worker_that_did_not_check():
    """A worker that died before it reported never checked the network: its verdict has no
    network_isolated line (it had a false 'the OS did not allow a private network
    namespace'); a timing worker that died leaves the checks' worker's line as it was."""
    data = ReferenceData(
        report=ReferenceReport(audit=AuditReport(problem="p", weak=False), strengthened=False),
        seeds=[1],
    )
    died = candidate_report(outcome(returncode=-11, signal_name="SIGSEGV"), PROBLEM, 9)
    result = checked_result(PROBLEM, fast_config(), data, died, None)
    assert "network_isolated" not in [check.name for check in result.checks]
    comparison = CaseComparison(failed=None, compared=0, checks=[], max_abs_error=0, rel_error=0)
    checked = checked_result(
        PROBLEM, fast_config(), data, CandidateReport(network_isolated=True), comparison
    )
    timed = timed_result(checked, died, fast_config(), list)
    assert [(c.name, c.passed) for c in timed.checks if c.name == "network_isolated"] == [
        ("network_isolated", True)
    ]


def test_success_without_the_parents_comparison_is_not_ok():
    data = ReferenceData(
        report=ReferenceReport(audit=AuditReport(problem="p", weak=False), strengthened=False),
        seeds=[1],
    )
    claimed = CandidateReport(status=None)  # "all checks passed", but no outputs were handed over
    result = checked_result(PROBLEM, fast_config(), data, claimed, None)
    assert result.status is Status.runtime_error
    assert "without handing its outputs over" in result.reason


def test_reference_outputs_and_jobs_leave_no_file_behind(tmp_path: Path):
    data = reference_data(PROBLEM, fast_config(), seed=1, work_dir=tmp_path)
    left = sorted(path.name for path in tmp_path.rglob("*"))
    assert left == [], left  # no reference outputs, no job.json, no inputs on disk
    # The outputs stay readable here, one case at a time, through files opened before.
    kinds = [case.kind for case in data.cases]
    assert kinds[:2] == ["seed", "repeat"] and kinds.count("seed") == len(data.seeds)
    for spec in data.cases:
        outputs = data.outputs(spec)
        assert [list(out.shape) for out in outputs] == [shape for shape, _ in spec.output_meta]
    assert data.outputs(data.cases[1])[0].equal(data.outputs(data.cases[0])[0])  # the repeat
    # What candidate workers get: specs to draw each case again, never tensors.
    assert all(case.input_digest for case in data.cases)


def test_an_evaluator_removes_its_own_work_dir():
    evaluator = Evaluator(fast_config())
    work_dir = evaluator.work_dir
    (work_dir / "inputs.pt").write_bytes(b"x" * 1024)
    del evaluator
    gc.collect()
    assert not work_dir.exists()


def test_a_cuda_candidate_needs_a_kernel_the_reference_does_not_launch():
    data = ReferenceData(
        report=ReferenceReport(audit=AuditReport(problem="p", weak=False), strengthened=False),
        seeds=[1],
    )
    comparison = CaseComparison(
        failed=None, compared=1, checks=[], max_abs_error=0.0, rel_error=0.0
    )
    config = fast_config()
    checked = checked_result(PROBLEM, config, data, CandidateReport(), comparison)
    assert checked.status is Status.ok  # ready to be timed
    kernels = lambda: ["vectorized_elementwise_kernel<gelu>"]  # noqa: E731
    borrowed = CandidateReport(cuda_kernels=["vectorized_elementwise_kernel<gelu>"])
    result = timed_result(checked, borrowed, config, kernels)
    assert result.status is Status.rejected and "only kernels the reference" in result.reason
    own = CandidateReport(cuda_kernels=["fused_gelu_kernel", "vectorized_elementwise_kernel<gelu>"])
    result = timed_result(checked, own, config, kernels)
    assert result.status is Status.ok
    assert any(
        c.name == "launches_own_kernel" and "fused_gelu_kernel" in c.detail for c in result.checks
    )


def test_a_line_that_is_not_kind_and_body_is_a_channel_error():
    """A worker's line is a typed message or nothing: one without a kind is never skipped
    over as if the channel were clean (the candidate's process writes this pipe)."""
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"body": {"status": "ok"}}\n' + json.dumps(report_message()).encode())
    os.write(write_end, b"\n")
    os.close(write_end)
    with ChannelReader(os.fdopen(read_end, "rb", buffering=0)) as reader:
        reader.drain()
    assert reader.error == "the worker sent a message that is not {kind, body}"
    assert [message.kind for message in reader.messages] == ["report"]
