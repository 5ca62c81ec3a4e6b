"""The throughput bench's candidates: the offline proposer's kernel, a build each, every one a
candidate the gate passes (bench/bench_throughput.py; the bench itself runs on a GPU machine)."""

from __future__ import annotations

from bench.bench_throughput import candidates, table
from bench.results_format import new_record
from harness.problem.load import problem_from_target
from harness.static.python import check_python
from tests.conftest import EXAMPLES, ROOT


def test_each_candidate_is_the_same_kernel_built_apart():
    problem = problem_from_target(str(ROOT / EXAMPLES["fused_gelu_block"]), "cpu", None)
    batch = candidates(problem, ["warm-up", "candidate 0", "candidate 1"])
    assert len({candidate.source for candidate in batch}) == 3  # a build each
    for candidate in batch:
        assert check_python(candidate.source, problem.class_name, problem.dtype) == []
    first, second = (candidate.source.splitlines() for candidate in batch[1:])
    assert [a for a, b in zip(first, second, strict=True) if a != b] == ["// candidate 0"]


def test_the_table_sets_each_way_against_the_serial_loop_and_one_gpu():
    record = new_record("throughput", "cpu")
    record.rows = [
        {"way": "serial", "gpus": 1, "candidates": 4, "seconds": 240.0, "per_hour": 60.0,
         "statuses": ["ok"] * 4},
        {"way": "kernelpilot", "gpus": 1, "candidates": 4, "seconds": 120.0, "per_hour": 120.0,
         "statuses": ["ok"] * 4},
        {"way": "kernelpilot", "gpus": 2, "candidates": 4, "seconds": 80.0, "per_hour": 180.0,
         "statuses": ["ok", "incorrect", "ok", "ok"], "phase_median_s": {"build": 12.0, "check": 5.5}},
    ]  # fmt: skip
    lines = table(record).splitlines()
    assert lines[2] == "| serial | 1 | 4 | 240.0 | 60.0 | 1.00x | 0.50x | ok |  |"
    assert lines[4] == (
        "| kernelpilot | 2 | 4 | 80.0 | 180.0 | 3.00x | 1.50x | incorrect, ok | build 12.0, check 5.5 |"
    )
    record.rows = record.rows[1:]  # --without-serial
    assert (
        table(record)
        .splitlines()[3]
        .startswith("| kernelpilot | 2 | 4 | 80.0 | 180.0 | - | 1.50x |")
    )


def test_a_candidates_cost_is_told_phase_by_phase():
    from bench.bench_throughput import phase_medians
    from harness.records import EvalResult, Status

    results = [
        EvalResult(status=Status.ok, phase_seconds={"build": 10.0, "check": 4.0}),
        EvalResult(status=Status.ok, phase_seconds={"build": 14.0, "check": 6.0, "timing": 3.0}),
        EvalResult(status=Status.build_error, phase_seconds={"build": 30.0}),
    ]
    assert phase_medians(results) == {"build": 14.0, "check": 5.0, "timing": 3.0}
