"""One evaluation per candidate: the gate and the build run once, whoever asks again."""

from __future__ import annotations

from harness.evaluate import Evaluator
from harness.problem import problem_from_target
from harness.records import Candidate, Status
from tests.conftest import FIXTURES, fast_config

PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")


def test_a_failed_build_is_recorded_and_never_built_again(monkeypatch):
    evaluator = Evaluator(fast_config(), seed=1)
    workers: list[str] = []
    run_candidate = evaluator._run_candidate

    def counted(problem, candidate, mode, *rest):
        workers.append(mode)
        return run_candidate(problem, candidate, mode, *rest)

    monkeypatch.setattr(evaluator, "_run_candidate", counted)
    broken = Candidate(source=(FIXTURES / "bad" / "compile_error.py").read_text())
    built = evaluator.build(PROBLEM, broken)
    assert built.status is Status.build_error and "float" in built.log
    again = evaluator.build(PROBLEM, broken)
    result = evaluator.evaluate(PROBLEM, broken)
    assert again == built
    assert result.status is Status.build_error and result.log == built.log
    assert workers == ["build"]  # one worker, one compile: not per call


def test_the_gate_runs_once_per_candidate(monkeypatch):
    import harness.evaluate as evaluate

    calls: list[str] = []
    monkeypatch.setattr(evaluate, "check_python", lambda *args: calls.append("gate") or ["no"])
    evaluator = Evaluator(fast_config(), seed=1)
    candidate = Candidate(source="class ModelNew: pass\n")
    assert evaluator.build(PROBLEM, candidate).status is Status.rejected
    assert evaluator.evaluate(PROBLEM, candidate).status is Status.rejected
    assert calls == ["gate"]
