"""One target from proposal to verdict: propose candidates, evaluate them, keep the best.

Today the only proposer is the offline one (no LLM). The LLM tree search plugs in here as
another source of candidates, evaluated by the same ``Evaluator``.
"""

from __future__ import annotations

from pydantic import BaseModel

from agents.offline import propose
from harness.evaluate import Evaluator
from harness.records import Candidate, EvalResult, Problem


class Attempt(BaseModel):
    """The best candidate for a target and its verdict, or why there is none."""

    problem: Problem
    candidate: Candidate | None = None
    result: EvalResult | None = None
    reason: str = ""


def optimize_problem(problem: Problem, evaluator: Evaluator) -> Attempt:
    evaluator.reference(problem)  # audit first: a weak spec stops here, before any build
    evaluator.progress(f"{problem.name}: proposing fused kernels (offline proposer)")
    proposal = propose(problem)
    if proposal.candidate is None:
        return Attempt(problem=problem, reason=proposal.reason)
    evaluator.prebuild(problem, [proposal.candidate])
    result = evaluator.evaluate(problem, proposal.candidate)
    return Attempt(
        problem=problem, candidate=proposal.candidate, result=result, reason=proposal.reason
    )
