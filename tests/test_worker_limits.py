"""A candidate's worker may run ``eval.run_timeout_s`` of its own: the builds the parent makes
for it do not count (a hung kernel whose build was cached used to run for build_timeout_s +
run_timeout_s, 15 minutes at the defaults), and a caller's deadline (a search's --max-time)
stops it where it is, as "out of time", not as the candidate's failure."""

from __future__ import annotations

import time

import pytest

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox.lifetime import OutOfTime
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


def test_a_slow_build_does_not_count_against_the_run_limit(problem, tmp_path):
    evaluator = Evaluator(fast_config(run_timeout_s=20, cache_dir=tmp_path), seed=3)
    answer = evaluator.builder.answer

    def slow_build(body, device, dtype):  # a build that takes longer than the run limit
        time.sleep(25)
        return answer(body, device, dtype)

    evaluator.builder.answer = slow_build  # type: ignore[method-assign]
    built = evaluator.build(problem, _candidate("honest"))
    assert built.status is None, built.reason


def test_a_deadline_stops_a_candidate_as_out_of_time_not_as_its_failure(problem, tmp_path):
    evaluator = Evaluator(fast_config(cache_dir=tmp_path), seed=3)
    evaluator.reference(problem)
    evaluator.deadline = time.monotonic() + 5
    with pytest.raises(OutOfTime):
        evaluator.evaluate(problem, _candidate("spin"))


def test_max_time_cuts_a_candidates_run_short_and_resume_runs_it_again(tmp_path):
    import json

    from agents.loop import pending
    from agents.trajectory import Trajectory
    from tests.interrupting import environment, leftovers, run_cli
    from tests.test_agent_loop import code, plan

    (tmp_path / "pyproject.toml").write_text(
        "[tool.kernelpilot.eval]\ncompile_baseline = false\nrun_timeout_s = 600\n"
        "[tool.kernelpilot.search]\nseed_offline = false\n"
    )
    script = tmp_path / "script.json"
    line = "        return torch.tanh(x) * self.scale + x"
    script.write_text(json.dumps([{"text": plan(line, "A loop.")},
                                  {"text": code((FIXTURES / "isolation_spin.py").read_text())}]))  # fmt: skip
    ran = run_cli(["optimize", str(FIXTURES / "scale_problem.py"), "--device", "cpu", "--llm",
                   "scripted", "--script", str(script), "--max-time", "20", "--out",
                   str(tmp_path / "out")], tmp_path, environment(tmp_path))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "the time budget ran out while a candidate ran" in ran.stderr
    trajectory = Trajectory.load(tmp_path / "out" / "trajectory-scale_problem.json")
    assert trajectory.stopped == "budget reached: 20 s of wall time"
    assert len(pending(trajectory.tree)) == 1  # its candidate: evaluated on --resume
    assert leftovers(ran.mark) == []
