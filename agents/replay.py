"""Replaying a saved trajectory: the same replies and the same verdicts, in the same order,
through the real loop, must grow the same tree (the loop's own choices are seeded).

The replies come back through ``ScriptedClient``; the verdicts from ``RecordedEvaluator``,
which answers each candidate (its node, its source) with the result the trajectory holds for it.
"""

from __future__ import annotations

from pathlib import Path

from agents.context import Reference
from agents.llm.client import LLMConfig
from agents.llm.scripted import ScriptedClient, ScriptedReply
from agents.loop import search
from agents.search.budget import Budget
from agents.search.config import SearchConfig
from agents.search.tree import Tree
from agents.team import Team, TeamConfig
from agents.trajectory import Trajectory
from harness.files import read_user_text
from harness.records import Candidate, EvalResult, Problem
from harness.sandbox import lifetime

# The recorded budget's limits, the run's caps and what the run's earlier targets spent.
LIMITS = {
    "attempts", "max_tokens", "max_cost_usd", "max_unpriced_tokens", "run_max_cost_usd",
    "run_max_unpriced_tokens", "run_spent_cost_usd", "run_spent_unpriced_tokens",
}  # fmt: skip


class RecordedEvaluator:
    """The evaluator's interface, answered from a trajectory's verdicts."""

    def __init__(self, trajectory: Trajectory) -> None:
        self.results = {
            node.candidate: node.result
            for node in trajectory.tree.nodes.values()
            if node.candidate and node.result is not None
        }
        self.work_dir = lifetime.scratch("replay-")
        self.deadline: float | None = None

    def progress(self, message: str) -> None:
        pass

    def prebuild(self, problem: Problem, candidates: list[Candidate]) -> None:
        pass

    def parallel(self, problem: Problem) -> int:
        return 1

    def build(self, problem: Problem, candidate: Candidate) -> None:
        pass

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        return self.results[candidate]


def recorded_replies(trajectory: Trajectory) -> list[ScriptedReply]:
    """Every model call of the trajectory, in the order the loop made them."""
    replies = []
    for node in trajectory.tree.nodes.values():  # in creation order
        for call in node.calls:
            if call.error.startswith("llm_call_failed"):
                replies.append(ScriptedReply(role=call.role, error="call_failed", text=call.error))
            else:
                replies.append(ScriptedReply(role=call.role, text=call.text,
                                             prompt_tokens=call.prompt_tokens,
                                             completion_tokens=call.completion_tokens,
                                             cached_tokens=call.cached_tokens,
                                             cost_usd=call.cost_usd))  # fmt: skip
    return replies


def replay(trajectory: Trajectory, llm: LLMConfig, config: SearchConfig, out: Path) -> Trajectory:
    """Run the loop again on ``trajectory``'s replies and verdicts; returns the new one."""
    problem = trajectory.problem
    reference = Reference(
        source=read_user_text(problem.source_path, "Python file"),
        class_name=problem.class_name,
        device=problem.device,
        dtype=problem.dtype,
    )
    team = Team(ScriptedClient(recorded_replies(trajectory)), llm, reference, TeamConfig())
    fresh = trajectory.model_copy(
        update={
            "tree": Tree.rooted(),
            "steps": 0,
            "stopped": "",
            "budget": Budget(**trajectory.budget.model_dump(include=LIMITS)),
        }
    )
    offline = next((n for n in trajectory.tree.nodes.values() if n.kind == "offline"), None)
    if offline is not None and offline.candidate is not None:
        fresh.tree.add(fresh.tree.root, "offline", source=offline.candidate.source,
                       plan=offline.plan)  # fmt: skip
        fresh.budget.charge(attempt=True)
    evaluator = RecordedEvaluator(trajectory)
    return search(problem, evaluator, team, fresh, out, config, lambda message: None)
