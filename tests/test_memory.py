"""Memory scales with the problem, not with the number of cases: the reference worker holds
one case at a time (a case here is 256 MiB of inputs and 256 MiB of outputs; there are ten)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT

MEASURE = """
import json, resource, sys
from harness.config import EvalConfig
from harness.problem import problem_from_target
from harness.reference import reference_data
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
