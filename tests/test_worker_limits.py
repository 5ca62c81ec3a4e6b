"""A candidate's worker may run ``eval.run_timeout_s`` of its own: the builds the parent makes
for it do not count (a hung kernel whose build was cached used to run for build_timeout_s +
run_timeout_s, 15 minutes at the defaults), and a caller's deadline (a search's --max-time)
stops it where it is, as "out of time", not as the candidate's failure."""

from __future__ import annotations

import time

import pytest

from harness.evaluate import Evaluator
from harness.lifetime import OutOfTime
from harness.problem import problem_from_target
from harness.records import Candidate, Status
from tests.conftest import FIXTURES, fast_config

RUN_LIMIT_S = 60  # a timing run on a loaded 2-core machine takes 15 s and more


def _candidate(name: str) -> Candidate:
    return Candidate(source=(FIXTURES / f"isolation_{name}.py").read_text())


@pytest.fixture
def problem():
    return problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")


def test_the_run_limit_starts_when_the_build_is_done(problem, tmp_path):
    evaluator = Evaluator(fast_config(run_timeout_s=RUN_LIMIT_S, cache_dir=tmp_path), seed=3)
    # A fresh cache: the kernels compile inside the checks' run (tens of seconds on 2 cores),
    # which the run limit does not count.
    honest = evaluator.evaluate(problem, _candidate("honest"))
    assert honest.status is Status.ok, honest.reason + honest.log
    # The same module, cached now; its `spin` never returns.
    spin = evaluator.evaluate(problem, _candidate("spin"))
    assert spin.status is Status.timeout
    assert spin.reason == f"no result after {RUN_LIMIT_S} s"


def test_a_deadline_stops_a_candidate_as_out_of_time_not_as_its_failure(problem, tmp_path):
    evaluator = Evaluator(fast_config(cache_dir=tmp_path), seed=3)
    evaluator.reference(problem)
    evaluator.deadline = time.monotonic() + 5
    with pytest.raises(OutOfTime):
        evaluator.evaluate(problem, _candidate("spin"))
