"""The search loop: select a node, let the team propose, evaluate, record, save.

A tree rooted at the reference; the offline proposer's kernel, when there is one, is the
root's first child. Each step the strategy selects a node, the team proposes ``width``
children (planner and coder on a verified node, the debugger on a failed one; by default one
per GPU the evaluator checks and times on), the new candidates are built in parallel and then
checked and timed, one at a time on each GPU, and the trajectory is written. It ends when a
budget runs out (attempts, wall time, tokens, cost: the spend caps of ``agents.search.budget``,
on by default). The wall time is also every model call's deadline:
a call it cuts short ends the search at once, so ``--max-time`` holds while a call runs.

What enters the tree from outside kernelpilot (the harness's verdicts, which quote worker logs
and the user's errors; the models' replies, plans and failures) is scrubbed of secrets first
(``harness.sandbox.redact``): the trajectory, the report and later prompts are made from the tree.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from agents.search.budget import Budget, Spend
from agents.search.config import SearchConfig, budget_limits
from agents.search.strategy import make_strategy
from agents.search.tree import Node, Tree
from agents.search.view import kernel_summary
from agents.team import Proposal, Team
from agents.trajectory import Trajectory
from harness.records import Candidate, EvalResult, Problem
from harness.sandbox import lifetime
from harness.sandbox.lifetime import OutOfTime
from harness.sandbox.redact import scrub, scrub_record

STATUS_WHY_CHARS = 300  # of why a step made no candidate, on its status line


class CandidateEvaluator(Protocol):
    """What the loop needs of an evaluator (``harness.evaluate.Evaluator``, or a recorded one).
    ``deadline`` (``time.monotonic()``): no candidate runs past it; reaching it raises
    ``OutOfTime``."""

    deadline: float | None

    def prebuild(self, problem: Problem, candidates: list[Candidate]) -> None: ...

    def build(self, problem: Problem, candidate: Candidate) -> object: ...

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult: ...

    def parallel(self, problem: Problem) -> int:
        """How many of the problem's candidates ``evaluate`` can check and time at once (from
        as many threads): one per GPU on cuda."""
        ...


def search(
    problem: Problem,
    evaluator: CandidateEvaluator,
    team: Team,
    trajectory: Trajectory,
    path: Path,
    config: SearchConfig,
    progress: Callable[[str], None],
) -> Trajectory:
    tree, budget = trajectory.tree, trajectory.budget
    # A trajectory from before widths were recorded, resumed, grew one a step.
    recorded = trajectory.width or (1 if trajectory.steps else None)
    width = config.width or recorded or evaluator.parallel(problem)
    trajectory.width = width
    resumed_at = budget.spent_seconds
    deadline = budget.deadline(resumed_at)  # every call of the model ends by then
    evaluator.deadline = deadline.at if deadline else None  # and every candidate's run
    try:
        # The offline proposer's kernel, or what an interrupted run left unevaluated.
        evaluate_children(problem, evaluator, tree, pending(tree))
        while not (stop := budget.exhausted()):
            lifetime.check()  # a stop signal whose exception was lost (a finalizer) ends it here
            rng = random.Random(f"{trajectory.seed}:{trajectory.steps}")  # the same on resume
            strategy = make_strategy(config, rng)
            node = strategy.select(tree)
            children: list[Node] = []
            out_of_time = False
            step = min(width, budget.attempts - budget.spent_attempts)  # never past the cap
            while len(children) < step and not out_of_time:
                proposal = team.propose(tree, node, budget, deadline)
                children.append(grow(tree, node, proposal, trajectory))  # charged as it grows
                out_of_time = proposal.out_of_time
            evaluate_children(problem, evaluator, tree, children)
            trajectory.steps += 1
            budget.tick(resumed_at)
            trajectory.save(path)
            progress(status_line(trajectory, node, children))
            if out_of_time:  # a call ended at the deadline, or could not be retried before it
                stop = budget.time_cap()
                break
        trajectory.stopped = f"budget reached: {stop}"
    except OutOfTime:  # a candidate's run cut short: unevaluated, so --resume runs it again
        budget.tick(resumed_at)
        trajectory.stopped = f"budget reached: {budget.time_cap()}"
        progress(f"{trajectory.target}: the time budget ran out while a candidate ran")
    except KeyboardInterrupt:
        trajectory.stopped = "interrupted"
        raise
    finally:
        evaluator.deadline = None  # the evaluator goes on with the run's next target
        trajectory.save(path)  # Ctrl-C, a fatal LLM error: what was found is kept
    return trajectory


def pending(tree: Tree) -> list[Node]:
    """Candidates not evaluated yet (a repeat, recorded with its failure, never is)."""
    return [node for node in tree.nodes.values() if node.candidate and node.result is None
            and not node.failure]  # fmt: skip


def grow(tree: Tree, parent: Node, proposal: Proposal, trajectory: Trajectory) -> Node:
    """The proposal as a new child of ``parent``, charged to the budget (an attempt, its
    tokens and cost); a repeat of an earlier source is recorded, never built or run again.
    The roles' words (replies, plan, failure) are scrubbed; the source is kept as the model
    wrote it (it is what runs, and the model only ever saw scrubbed text)."""
    earlier = next((n for n in tree.nodes.values()
                    if n.candidate and n.candidate.source == proposal.source), None)  # fmt: skip
    calls = [scrub_record(call) for call in proposal.calls]
    child = tree.add(parent, "debug" if proposal.kind == "debug" else "improve",
                     source=proposal.source, plan=scrub(proposal.plan),
                     failure=scrub(proposal.failure), calls=calls)  # fmt: skip
    child.seconds["llm"] = sum(call.seconds for call in calls)
    trajectory.budget.charge(Spend.of(calls), attempt=True)
    if earlier is not None:
        child.failure = f"the same candidate as node {earlier.id}: not built or run again"
    return child


def evaluate_children(
    problem: Problem, evaluator: CandidateEvaluator, tree: Tree, children: list[Node]
) -> None:
    """Build the new candidates in parallel; check and time them, one at a time per device.

    On cuda a GPU does not wait for the slowest build: each candidate is checked and timed as
    soon as its own build is done and a GPU is free (``CandidateEvaluator.parallel``), while the
    others are still building on the host's cores. On cpu the builds would take the cores the
    timing runs on, so all are built first, then checked and timed one after another.
    """
    fresh = [(child, child.candidate) for child in children
             if child.candidate and child.result is None and not child.failure]  # fmt: skip
    try:
        if len(fresh) > 1 and problem.device == "cuda":
            _evaluate_at_once(problem, evaluator, tree, fresh)
            return
        if len(fresh) > 1:
            started = time.perf_counter()
            evaluator.prebuild(problem, [candidate for _, candidate in fresh])
            for child, _ in fresh:
                child.seconds["prebuild"] = (time.perf_counter() - started) / len(fresh)
        for child, candidate in fresh:
            _evaluate(problem, evaluator, child, candidate)
    finally:
        for child, _ in fresh:  # the loop's latest eager median, in the children's order
            eager = child.result.timings.eager if child.result else None
            if eager is not None:
                tree.root_ms = eager.median_ms


def _evaluate_at_once(
    problem: Problem, evaluator: CandidateEvaluator, tree: Tree, fresh: list[tuple[Node, Candidate]]
) -> None:
    """Each candidate built, then checked and timed as soon as a GPU is free, all at once."""

    def built_then_evaluated(child: Node, candidate: Candidate) -> None:
        evaluator.build(problem, candidate)
        _evaluate(problem, evaluator, child, candidate)

    with ThreadPoolExecutor(max_workers=len(fresh)) as pool:
        runs = [pool.submit(built_then_evaluated, *pair) for pair in fresh]
        for run in runs:
            run.result()  # the first failure (OutOfTime) once every run has ended


def _evaluate(
    problem: Problem, evaluator: CandidateEvaluator, child: Node, candidate: Candidate
) -> None:
    started = time.perf_counter()
    # Scrubbed on the way in: the verdict quotes worker logs and the user's errors.
    child.result = scrub_record(evaluator.evaluate(problem, candidate))
    child.seconds["evaluate"] = time.perf_counter() - started
    child.seconds.update(child.result.phase_seconds)


def status_line(trajectory: Trajectory, node: Node, children: list[Node]) -> str:
    """One line per step: what grew from what, how it went, the best so far, the spend."""
    budget, best = trajectory.budget, trajectory.tree.best()
    outcomes = ", ".join(f"{child.id} {outcome(child)}" for child in children)
    # against the search's one baseline, as the prompts list it (agents.search.view)
    speedup = kernel_summary(trajectory.tree, best, "").speedup_vs_eager if best else None
    cost = f", ${budget.spent_cost_usd:.3f}" if budget.spent_cost_usd else ""
    cached = trajectory.spend().total.cached_tokens  # None: a server that does not say
    cached_part = f" ({cached} cached)" if cached else ""
    return (
        f"{trajectory.target}: step {trajectory.steps} from {node.id}: {outcomes}; best "
        f"{f'{speedup:.2f}x' if speedup else 'none yet'}; attempts {budget.spent_attempts}/"
        f"{budget.attempts}, {budget.spent_tokens} tokens{cached_part}{cost}"
    )


def outcome(node: Node) -> str:
    """A new node's verdict in a few words; without a candidate, why (a failed call's error)."""
    if node.result:
        return node.result.status.value
    if node.candidate:
        return "repeat"
    why = " ".join(node.failure.split())  # one line, whatever the failure quoted
    return f"no candidate ({why[:STATUS_WHY_CHARS]}{'...' if len(why) > STATUS_WHY_CHARS else ''})"


def new_trajectory(
    problem: Problem, llm: str, config: SearchConfig, seed: int, offline: Candidate | None = None
) -> Trajectory:
    """A fresh tree, with the offline proposer's kernel as the root's first child if any."""
    tree = Tree.rooted()
    budget = Budget(**budget_limits(config))
    if offline is not None:
        tree.add(tree.root, "offline", source=offline.source, plan=offline.note)
        budget.charge(attempt=True)
    return Trajectory(
        target=problem.name, problem=problem, llm=llm, strategy=config.strategy, seed=seed,
        budget=budget, tree=tree,
    )  # fmt: skip
