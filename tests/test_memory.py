"""Memory scales with the problem, not with the number of cases: the reference worker holds
one case at a time (a case here is 256 MiB of inputs and 256 MiB of outputs; there are ten);
the checks' worker reads outputs back a chunk at a time; and where the harness's own work runs
out of memory, the verdict says it is the harness's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from tests.conftest import FIXTURES, ROOT, fast_config

MEASURE = """
import json, resource, sys
from harness.config import EvalConfig
from harness.problem.load import problem_from_target
from harness.problem.reference import reference_data
data = reference_data(problem_from_target(sys.argv[1], "cpu", "float32"), EvalConfig(), seed=1)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
print(json.dumps({"cases": len(data.cases), "peak": peak}))
"""


def test_the_reference_worker_holds_one_case_at_a_time():
    completed = subprocess.run(
        [sys.executable, "-c", MEASURE, str(FIXTURES / "memory_problem.py")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    measured = json.loads(completed.stdout.strip().splitlines()[-1])
    case = 2 * 256 * 2**20  # one case's inputs and outputs
    assert measured["cases"] >= 8
    # Holding every case would take cases x 512 MiB (over 4 GiB); one case at a time leaves
    # the worker's own footprint (torch, ~0.5 GiB) plus a few cases' worth of tensors.
    assert measured["peak"] < 2**29 + 4 * case, measured


FINGERPRINT = """
import json, resource, torch
from harness.workers import guards
out = torch.randn(64 * 2**20)  # 256 MiB of float32
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
guards.fingerprint([out])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grew": after - before}))
"""


def test_reading_outputs_back_takes_a_chunk_not_four_times_the_output():
    """The checks' worker sums every output element at return and again after synchronizing.
    Summed through a whole float64 copy and its absolute value, that took four times the
    output beside it: an 8 GiB output of KernelBench's level1/38_L1Norm_ ran the worker out
    of an H100's memory, and the honest kernel was called a runtime error."""
    completed = subprocess.run(
        [sys.executable, "-c", FINGERPRINT], capture_output=True, text=True, cwd=ROOT, check=True
    )
    grew = json.loads(completed.stdout.strip().splitlines()[-1])["grew"]
    assert grew < 64 * 2**20, grew  # whole-output float64 copies: 1 GiB more


AUDIT = """
import json, resource, torch
from harness.problem.audit import NullAnswerAudit
from harness.judge.tolerance import tolerance_for
x = torch.randn(64 * 2**20)  # 256 MiB
y = x.sin()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
audit = NullAnswerAudit(tolerance_for("float32"))
audit.add([x], [y])  # the first case: every null answer is tried on it
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grew": after - before, "findings": len(audit.findings())}))
"""


def test_the_audit_refutes_null_answers_without_output_sized_copies_of_them():
    """Zeros and a constant are one element expanded to the output's shape: a sample refutes
    them on a problem that is not weak. As full tensors they took another output's memory
    beside the case (8 GiB on KernelBench's largest level-1 problems, on the device)."""
    completed = subprocess.run(
        [sys.executable, "-c", AUDIT], capture_output=True, text=True, cwd=ROOT, check=True
    )
    measured = json.loads(completed.stdout.strip().splitlines()[-1])
    assert measured["findings"] == 0
    assert measured["grew"] < 64 * 2**20, measured  # a full constant: 256 MiB more


VARIANT = """
import json, resource, torch
from harness.problem.variants import resized_inputs
x = torch.randn(8192, 8192)  # 256 MiB
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
(wider,) = resized_inputs([x], variant=2, seed=7)  # the last dimension grown a little
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"grew": after - before, "shape": list(wider.shape)}))
"""


def test_a_shape_variant_is_drawn_without_an_index_twice_the_input():
    """A variant's elements are drawn from the input's at random: through one int64 index of
    every element, that took twice a float32 input beside it (16 GiB for an 8 GiB input, in
    every worker that draws the case). Drawn in runs of neighbours, one index per run, the
    new tensor is nearly all."""
    completed = subprocess.run(
        [sys.executable, "-c", VARIANT], capture_output=True, text=True, cwd=ROOT, check=True
    )
    measured = json.loads(completed.stdout.strip().splitlines()[-1])
    assert measured["shape"][0] == 8192 and measured["shape"][1] > 8192
    # the new tensor (256 MiB and a little) and an index of 2 MiB: 261 MiB measured; an index
    # of every element: 768 MiB and more (a chunk of it at a time, before runs: 450 MiB)
    assert measured["grew"] < 2**28 + 2**25, measured


HARNESS_OOM_HOOK = Path(__file__).resolve().parent / "hooks" / "harness_oom"
PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")


def test_the_harness_running_out_of_memory_in_the_checks_worker_is_said_to_be_the_harness(
    monkeypatch,
):
    """Out of memory in the harness's own work on a case (here: reading the outputs back,
    through tests/hooks/harness_oom) is not the kernel's fault: the verdict names the
    harness, what was free and the options that lower it, instead of 'the worker died'."""
    monkeypatch.setenv("KP_TEST_HARNESS_OOM", "1")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HARNESS_OOM_HOOK), os.environ.get("PYTHONPATH", "")])
    )
    honest = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
    result = Evaluator(fast_config(), seed=1).evaluate(PROBLEM, honest)
    assert result.status is Status.runtime_error
    failed = [check for check in result.checks if not check.passed]
    assert [check.name for check in failed] == ["harness_memory"], result.reason
    assert "the harness ran out of device memory" in result.reason
    assert "not a fault of the kernel or the module" in result.reason
    assert "Tried to allocate 16.00 GiB" in result.reason
    assert "eval.shape_variants = 0" in result.reason


def test_a_candidate_running_out_of_memory_in_its_own_call_is_its_runtime_error():
    """The other side: memory the candidate's forward asks for is the candidate's."""
    source = (
        (FIXTURES / "isolation_honest.py")
        .read_text()
        .replace(
            "        return _ext.honest(x, self.scale)",
            "        _ext.honest(x, self.scale)\n"
            "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 1 TiB')",
        )
    )
    result = Evaluator(fast_config(), seed=1).evaluate(PROBLEM, Candidate(source=source))
    assert result.status is Status.runtime_error
    assert [check.name for check in result.checks if not check.passed] == ["runs"]
    assert "Tried to allocate 1 TiB" in result.reason
    assert "harness" not in result.reason
