"""One target from proposal to verdict: the offline proposer's kernel first, then (with an
LLM) the team's tree search; the best verified kernel and the trajectory that found it.

A search that a spend cap stopped says so in the attempt's reason, which the report shows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from agents.loop import evaluate_children, new_trajectory, pending, search
from agents.offline import propose
from agents.search.budget import RunSpend
from agents.search.config import SearchConfig, budget_limits, run_spend
from agents.team import Team
from agents.trajectory import Trajectory
from harness.evaluate import Evaluator
from harness.records import Candidate, EvalResult, Problem


class Attempt(BaseModel):
    """The best candidate for a target and its verdict, or why there is none."""

    problem: Problem
    candidate: Candidate | None = None
    result: EvalResult | None = None
    reason: str = ""
    trajectory: Trajectory | None = None
    trajectory_file: Path | None = None


def optimize_problem(
    problem: Problem,
    evaluator: Evaluator,
    team: Team | None = None,
    config: SearchConfig | None = None,
    out_dir: Path | None = None,
    resume: Trajectory | None = None,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    spend: RunSpend | None = None,
) -> Attempt:
    """The offline proposer alone when ``team`` is None; the LLM search otherwise.

    ``spend``: the run's spend so far, shared by its targets (None: this target is the run).
    """
    config = config or SearchConfig()
    say = progress or evaluator.progress
    evaluator.reference(problem)  # audit first: a weak spec stops here, before any build
    trajectory = resume
    if trajectory is not None:  # the limits of this run, on what the earlier one spent
        trajectory.budget = trajectory.budget.model_copy(update=budget_limits(config))
        trajectory.stopped = ""
    if trajectory is None:
        say(f"{problem.name}: proposing fused kernels (offline proposer)")
        proposal = propose(problem, evaluator.config)
        llm = "offline" if team is None else team.llm.model
        first = proposal.candidate if config.seed_offline or team is None else None
        trajectory = new_trajectory(problem, llm, config, seed, first)
        if proposal.candidate is None and team is None:
            return Attempt(problem=problem, reason=proposal.reason)
    path = (out_dir or evaluator.work_dir) / f"trajectory-{problem.name}.json"
    if team is None:
        evaluate_children(problem, evaluator, trajectory.tree, pending(trajectory.tree))
        trajectory.stopped = "offline proposer: one candidate"
        trajectory.save(path)
    else:
        say(f"{problem.name}: tree search with {team.llm.model} ({config.strategy})")
        spend = spend or run_spend(config)
        before = spend.start(trajectory.budget)
        try:
            search(problem, evaluator, team, trajectory, path, config, say)
        finally:
            spend.finish(trajectory.budget, before)
    attempt = best_attempt(problem, trajectory, path)
    if cap := trajectory.budget.spend_cap():
        say(f"{problem.name}: search stopped at {cap}")
        attempt.reason = "; ".join(part for part in (attempt.reason, cap_note(cap)) if part)
    return attempt


def cap_note(cap: str) -> str:
    """What the report says about a search a spend cap stopped, and how to lift the cap."""
    return (
        f"the search stopped at {cap}: raise search.max_cost_usd / run_max_cost_usd "
        "(--max-cost) or the token caps in [tool.kernelpilot.search] to search further"
    )


def best_attempt(problem: Problem, trajectory: Trajectory, path: Path) -> Attempt:
    """The fastest verified node; without one, the last verdict and why nothing passed."""
    tree = trajectory.tree
    best = tree.best()
    evaluated = [node for node in tree.nodes.values() if node.result is not None]
    shown = best or (evaluated[-1] if evaluated else None)
    attempt = Attempt(problem=problem, trajectory=trajectory, trajectory_file=path)
    if shown is None or shown.result is None:
        failures = [node.failure for node in tree.nodes.values() if node.failure]
        attempt.reason = "no candidate: " + (failures[-1] if failures else "none proposed")
        return attempt
    attempt.candidate = shown.candidate
    attempt.result = shown.result
    if best is None:
        attempt.reason = f"none of {len(evaluated)} evaluated candidates was verified"
    return attempt
