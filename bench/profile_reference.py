"""Where the reference worker's time goes: its whole run, in this process, under cProfile.

The reference run draws the verification cases, audits the spec, profiles the reference's ops
and writes the case files: everything an evaluation does before any candidate code runs.

    python -m bench.profile_reference [TARGET] [--device cpu|cuda] [--top N]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from harness.config import EvalConfig
from harness.problem.load import problem_from_target
from harness.problem.reference import draw_seeds
from harness.sandbox.jobs import WorkerJob
from harness.workers.reference import run_reference

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("target", nargs="?", default=str(ROOT / "bench/problems/bias_gelu_2048.py"))
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--top", type=int, default=25, help="functions to list, by own time")
    args = parser.parse_args()
    problem = problem_from_target(args.target, args.device, None)
    config = EvalConfig()
    with tempfile.TemporaryDirectory() as work:
        job = WorkerJob(
            mode="reference",
            problem=problem,
            config=config,
            cache_dir=Path(work),
            seeds=draw_seeds(config, 0),
            recompute=config.recomputes(problem.device),
        )
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.runcall(run_reference, job, Path(work))
        total = time.perf_counter() - start
    print(f"reference run of {problem.name} on {args.device}: {total:.2f} s")
    pstats.Stats(profile).sort_stats("tottime").print_stats(args.top)
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
