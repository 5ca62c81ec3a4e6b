"""GPU end to end: the examples on cuda, and a sticky CUDA error that does not break the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from harness.evaluate import Evaluator
from harness.problem import problem_from_target
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
    assert row["device"] == "cuda" and row["eager_ms"] and row["candidate_ms"]
    assert (out / "junit.xml").exists() and row["candidate_file"]
