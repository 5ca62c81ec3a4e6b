"""What the sandbox costs: one honest candidate's whole evaluation with every worker sandboxed
(bubblewrap) and with the sandbox off, alternated in one run on one machine.

With the sandbox on, each worker starts inside bubblewrap and, on cuda, a candidate's outputs
reach the comparator as a file (CUDA IPC cannot cross sandboxes) instead of being mapped: the
difference between the columns is that. Both sides start from a warm build cache (one
evaluation of each first, not counted) and use the smallest timing phase.

    python bench/bench_sandbox.py [--device cpu|cuda] [--rounds 3] [--problem P --candidate C]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config import EvalConfig  # noqa: E402
from harness.evaluate import Evaluator  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402
from harness.records import Candidate, Status  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=3, help="Timed evaluations per side.")
    parser.add_argument("--problem", default="examples/fused_gelu_block.py")
    parser.add_argument("--candidate", default=None, help="Default: the example's for --device.")
    parser.add_argument("--out", type=Path, default=None, help="Write the rows as JSON here.")
    args = parser.parse_args()
    candidate_path = Path(
        args.candidate or f"examples/candidates/fused_gelu_block_{args.device}.py"
    )
    problem = problem_from_target(str(ROOT / args.problem), args.device, "float32")
    candidate = Candidate(source=(ROOT / candidate_path).read_text(), origin="user")
    for side in SIDES:  # warm-up: the build, the caches of the first start
        evaluate_once(problem, candidate, side, seed=0)
    rows: dict[str, list[dict]] = {side: [] for side in SIDES}
    for round_number in range(args.rounds):
        for side in SIDES if round_number % 2 == 0 else reversed(SIDES):
            rows[side].append(evaluate_once(problem, candidate, side, seed=round_number + 1))
    medians = {side: statistics.median(r["seconds"] for r in rows[side]) for side in SIDES}
    print(f"{args.problem} on {args.device}, {args.rounds} evaluations a side (median s):")
    for side in SIDES:
        spread = [round(r["seconds"], 2) for r in rows[side]]
        print(f"  sandbox {side:10s} {medians[side]:7.2f}  {spread}")
    print(f"  ratio bubblewrap/off: {medians['bubblewrap'] / medians['off']:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"device": args.device, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
