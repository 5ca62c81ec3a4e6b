"""A crashing, a hanging and a wrong candidate each end as their own status; the run goes on."""

from __future__ import annotations

from harness.evaluate import Evaluator
from harness.problem import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox import clean_environment
from tests.conftest import FIXTURES, fast_config


def _candidate(name: str) -> Candidate:
    return Candidate(source=(FIXTURES / f"isolation_{name}.py").read_text())


def test_failures_are_contained_and_the_run_goes_on():
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    evaluator = Evaluator(fast_config(run_timeout_s=25), seed=7)
    candidates = {name: _candidate(name) for name in ["crash", "spin", "wrong", "honest"]}
    evaluator.prebuild(problem, list(candidates.values()))
    results = {name: evaluator.evaluate(problem, c) for name, c in candidates.items()}

    assert results["crash"].status is Status.runtime_error
    assert "SIGSEGV" in results["crash"].reason
    assert results["spin"].status is Status.timeout
    assert results["wrong"].status is Status.incorrect
    failed = [check.name for check in results["wrong"].checks if not check.passed]
    assert "correct_outputs" in failed
    honest = results["honest"]
    assert honest.status is Status.ok, honest.reason + honest.log
    assert honest.eager and honest.candidate and honest.vs_eager is not None
    assert all(check.passed for check in honest.checks if check.name != "network_isolated")


def test_worker_environment_has_no_secrets(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2")
    monkeypatch.setenv("HARMLESS", "yes")
    env = clean_environment()
    assert "GITHUB_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert "MY_SERVICE_PASSWORD" not in env
    assert env["HARMLESS"] == "yes"
