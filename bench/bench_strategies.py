"""Greedy vs epsilon-greedy on the same simulated runs: the real search loop, a simulated team
and a simulated evaluator (no LLM, no builds), many seeds.

Each proposal from a node is a kernel whose time above a floor (the memory-bound limit, 0.3 of
the reference's time) is its parent's times a factor drawn from the run's seed (most attempts a
bit slower or faster, some much faster, a share failing), and a failed kernel's repair
succeeds with a set chance. What is compared: the best speedup over the
reference after the budget, over the same seeds for both strategies.

    python -m bench strategies [--runs 200] [--attempts 30] [--epsilon 0.3] [--out FILE]
"""

from __future__ import annotations

import random
import statistics
import tempfile
from pathlib import Path

import click

from agents.loop import new_trajectory, search
from agents.search.config import SearchConfig
from agents.search.tree import Node, Tree
from agents.team import Proposal
from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.records import Candidate, EvalResult, Problem, Status, TimingStats

PROBLEM = Problem(
    name="sim", source_path="sim.py", class_name="Model", device="cpu", dtype="float32"
)
REFERENCE_MS = 1.0
FLOOR_MS = 0.3  # no kernel beats the memory-bound limit: the best speedup is 3.33x


class SimTeam:
    """Proposals whose (hidden) kernel time is drawn from the run's random stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.made = rng, 0

    def propose(
        self, tree: Tree, node: Node, budget: object = None, deadline: object = None
    ) -> Proposal:
        self.made += 1
        base = REFERENCE_MS if node.kind == "root" or not node.ok else node.score_ms
        if node.kind != "root" and not node.ok:  # the debugger: repairs most failures
            fails = self.rng.random() < 0.4
            factor = self.rng.uniform(0.8, 1.2)
        else:
            fails = self.rng.random() < 0.35
            factor = self.rng.choice([self.rng.uniform(0.85, 1.3), self.rng.uniform(0.4, 0.8)])
        ms = float("nan") if fails else FLOOR_MS + (base - FLOOR_MS) * factor
        return Proposal(kind="debug" if not node.ok and node.kind != "root" else "improve",
                        source=f"# kernel {self.made}: {ms}")  # fmt: skip


class SimEvaluator:
    deadline: float | None = None

    def prebuild(self, problem: Problem, candidates: list[Candidate]) -> None:
        pass

    def parallel(self, problem: Problem) -> int:
        return 1

    def build(self, problem: Problem, candidate: Candidate) -> None:
        pass

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        ms = float(candidate.source.rsplit(": ", 1)[1])
        if ms != ms:  # nan: a failed candidate
            return EvalResult(status=Status.incorrect)
        timing = TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms, samples=10)
        eager = TimingStats(median_ms=REFERENCE_MS, iqr_ms=0.0, min_ms=REFERENCE_MS, samples=10)
        return EvalResult(status=Status.ok, candidate=timing, eager=eager)


def best_speedup(strategy: str, seed: int, attempts: int, epsilon: float, out: Path) -> float:
    config = SearchConfig(strategy=strategy, epsilon=epsilon, attempts=attempts, seed_offline=False)
    trajectory = new_trajectory(PROBLEM, "sim", config, seed)
    team = SimTeam(random.Random(seed))  # the same proposals' draws for both strategies
    search(PROBLEM, SimEvaluator(), team, trajectory, out, config, lambda line: None)  # type: ignore[arg-type]
    best = trajectory.tree.best()
    return REFERENCE_MS / best.score_ms if best else 0.0


@click.command("strategies")
@click.option(
    "--runs", type=click.IntRange(min=1), default=200, show_default=True, help="Seeds per strategy."
)
@click.option(
    "--attempts", type=click.IntRange(min=1), default=30, show_default=True, help="Budget per run."
)
@click.option("--epsilon", type=click.FloatRange(0, 1), default=0.3, show_default=True)
@out_option
def cli(runs: int, attempts: int, epsilon: float, out: Path | None) -> None:
    """Greedy vs epsilon-greedy search on simulated runs (no LLM, no builds)."""
    trajectory = Path(tempfile.mkdtemp(prefix="kp-strategies-")) / "trajectory.json"
    rows = []
    for strategy in ("greedy", "epsilon-greedy"):
        speedups = [best_speedup(strategy, seed, attempts, epsilon, trajectory)
                    for seed in range(runs)]  # fmt: skip
        rows.append(
            {
                "strategy": strategy,
                "median_best_speedup": statistics.median(speedups),
                "mean_best_speedup": statistics.mean(speedups),
                "worst_best_speedup": min(speedups),
                "best_best_speedup": max(speedups),
            }
        )
    context = {"runs": runs, "attempts": attempts, "epsilon": epsilon,
               "ceiling_speedup": REFERENCE_MS / FLOOR_MS}  # fmt: skip
    finish(new_record("strategies", "cpu", rows, context), out, render)


def render(record: BenchmarkRecord) -> str:
    c = record.context
    lines = [
        f"{c['runs']} simulated runs of {c['attempts']} attempts each, epsilon {c['epsilon']}, "
        f"ceiling {c['ceiling_speedup']:.2f}x",
        "| strategy | median best speedup | mean | worst | best |",
        "|---|---|---|---|---|",
    ]
    for row in record.rows:
        lines.append(
            f"| {row['strategy']} | {row['median_best_speedup']:.2f}x | "
            f"{row['mean_best_speedup']:.2f}x | {row['worst_best_speedup']:.2f}x | "
            f"{row['best_best_speedup']:.2f}x |"
        )
    return "\n".join(lines)
