"""GPU end to end: the examples on cuda, and a sticky CUDA error that does not break the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from tests.conftest import FIXTURES, ROOT, fast_config

pytestmark = pytest.mark.gpu


def test_illegal_address_is_contained_and_the_next_evaluation_works():
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cuda", "float32")
    evaluator = Evaluator(fast_config(), seed=3)
    bad = Candidate(source=(FIXTURES / "gpu_illegal_address.py").read_text())
    good = Candidate(source=(FIXTURES / "gpu_honest.py").read_text())
    evaluator.prebuild(problem, [bad, good])
    crashed = evaluator.evaluate(problem, bad)
    assert crashed.status is Status.runtime_error, crashed.reason
    honest = evaluator.evaluate(problem, good)
    assert honest.status is Status.ok, honest.reason + honest.log


@pytest.mark.parametrize("example", ["fused_gelu_block.py", "swiglu.py"])
def test_examples_optimize_on_cuda(example, tmp_path):
    out = tmp_path / "out"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "bot.cli",
            "optimize",
            str(ROOT / "examples" / example),
            "--device",
            "cuda",
            "--out",
            str(out),
            "--time-budget",
            "0.5",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    row = json.loads((out / "report.json").read_text())["targets"][0]
    assert row["status"] == "ok", row["reason"]
    timings = row["result"]["timings"]
    assert row["device"] == "cuda" and timings["eager"] and timings["candidate"]
    assert (out / "junit.xml").exists() and row["candidate_file"]


def test_async_inputs_are_still_being_produced_when_the_call_starts():
    """What a kernel that does not wait for the current stream sees: poison, not the inputs."""
    import torch

    from harness.workers.streams import Staged

    raw = [torch.randn(1024, 2048, device="cuda")]
    staged = Staged(raw, "cuda", async_stream=True)
    impatient = torch.cuda.Stream()
    raw[0] * 1  # the multiply kernel loaded now (a lazy load waits for an idle device)
    with staged.current_stream():
        inputs = staged.produce()
        waits = inputs[0] * 1  # on the current stream: ordered after the copy
        with torch.cuda.stream(impatient):  # a stream that does not wait for the current one
            skips = inputs[0] * 1
    torch.cuda.synchronize()
    assert skips.isnan().any(), "a kernel on another stream saw the inputs before the copy"
    assert waits.equal(raw[0]) and inputs[0].equal(raw[0])


@pytest.mark.parametrize(
    ("problem_file", "candidate_file", "expected"),
    [
        ("fixtures/scale_problem.py", "fixtures/gpu_honest.py", Status.ok),
        (
            "redteam/problems/bias_gelu.py",
            "redteam/cuda/p05_capped_grid_no_stride.py",
            Status.incorrect,
        ),
    ],
)
def test_outputs_handed_over_through_cuda_ipc_get_the_stored_outputs_verdict(
    problem_file, candidate_file, expected
):
    """The comparator (reference outputs made again on the device, the candidate's outputs
    mapped through CUDA IPC) and the parent (outputs stored on the host) agree."""
    tests = ROOT / "tests"
    problem = problem_from_target(str(tests / problem_file), "cuda", "float32")
    candidate = Candidate(source=(tests / candidate_file).read_text())
    verdicts = {}
    for mode in ("recomputed", "stored"):
        evaluator = Evaluator(fast_config(reference_outputs=mode), seed=7)
        result = evaluator.evaluate(problem, candidate)
        evaluator.close()
        verdicts[mode] = (result.status, result.reason.split(":")[0])
        if result.status is Status.ok:
            assert any(
                c.name == "launches_own_kernel" and "own CUDA kernels" in c.detail
                for c in result.checks
            )
    assert verdicts["recomputed"] == verdicts["stored"]
    assert verdicts["recomputed"][0] is expected, verdicts
