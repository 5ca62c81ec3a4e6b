"""What the sandbox costs: one honest candidate's whole evaluation with every worker sandboxed
(bubblewrap) and with the sandbox off, alternated in one run on one machine.

With the sandbox on, each worker starts inside bubblewrap and, on cuda, a candidate's outputs
reach the comparator as a file (CUDA IPC cannot cross sandboxes) instead of being mapped: the
difference between the columns is that. Both sides start from a warm build cache (one
evaluation of each first, not counted) and use the smallest timing phase.

    python -m bench sandbox [--device cpu|cuda] [--rounds 3] [--problem P --candidate C]
        [--out FILE]
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click

from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status

ROOT = Path(__file__).resolve().parent.parent

SIDES = ("bubblewrap", "off")


def evaluate_once(problem, candidate: Candidate, sandbox: str, seed: int) -> dict:
    config = EvalConfig(sandbox=sandbox, compile_baseline=False, time_budget_s=0.2, min_reps=3)
    started = time.perf_counter()
    evaluator = Evaluator(config, seed=seed)
    try:
        result = evaluator.evaluate(problem, candidate)
    finally:
        evaluator.close()
    seconds = time.perf_counter() - started
    if result.status is not Status.ok:
        raise SystemExit(f"{sandbox}: the candidate was not ok: {result.status} {result.reason}")
    return {"seconds": seconds, "phases": result.phase_seconds}


@click.command("sandbox")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--rounds", type=click.IntRange(min=1), default=3, show_default=True,
              help="Timed evaluations per side.")  # fmt: skip
@click.option("--problem", default="examples/fused_gelu_block.py", show_default=True)
@click.option("--candidate", default=None, help="Default: the example's for --device.")
@out_option
def cli(device: str, rounds: int, problem: str, candidate: str | None, out: Path | None) -> None:
    """What the sandbox costs: one evaluation with bubblewrap on and off."""
    candidate_path = Path(candidate or f"examples/candidates/fused_gelu_block_{device}.py")
    target = problem_from_target(str(ROOT / problem), device, "float32")
    honest = Candidate(source=(ROOT / candidate_path).read_text(), origin="user")
    for side in SIDES:  # warm-up: the build, the caches of the first start
        evaluate_once(target, honest, side, seed=0)
    rows: list[dict] = []
    for round_number in range(rounds):
        for side in SIDES if round_number % 2 == 0 else reversed(SIDES):
            measured = evaluate_once(target, honest, side, seed=round_number + 1)
            rows.append({"sandbox": side, "round": round_number, **measured})
    context = {"problem": problem, "candidate": str(candidate_path), "rounds": rounds}
    finish(new_record("sandbox", device, rows, context), out, render)


def render(record: BenchmarkRecord) -> str:
    seconds = {side: [r["seconds"] for r in record.rows if r["sandbox"] == side] for side in SIDES}
    medians = {side: statistics.median(values) for side, values in seconds.items()}
    lines = [
        f"{record.context['problem']} on {record.device}, {record.context['rounds']} "
        "evaluations a side (median s):"
    ]
    for side in SIDES:
        spread = [round(value, 2) for value in seconds[side]]
        lines.append(f"  sandbox {side:10s} {medians[side]:7.2f}  {spread}")
    lines.append(f"  ratio bubblewrap/off: {medians['bubblewrap'] / medians['off']:.2f}")
    return "\n".join(lines)
