"""Fill the build cache for every CUDA candidate the GPU tests use, all builds in one pool.

On a GPU machine the tests then find their kernels built; run before `pytest -m gpu`.
One pool across problems: builds of different problems run side by side (one pool per
problem left most cores idle and took most of the stage's 10 minutes).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from bench.cuda_candidates import cuda_candidates
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target


def main() -> int:
    started = time.monotonic()
    evaluator = Evaluator(EvalConfig(build_jobs=1), progress=lambda m: print(m, flush=True))
    jobs = [
        (problem_from_target(target, "cuda", "float32"), label, candidate)
        for target, entries in cuda_candidates().items()
        for label, candidate in entries
    ]
    workers = max(1, len(os.sched_getaffinity(0)))
    print(f"building {len(jobs)} CUDA candidates, {workers} at a time", flush=True)

    def build(job):
        problem, label, candidate = job
        return label, evaluator.build(problem, candidate)

    failed = 0
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for label, report in pool.map(build, jobs):
            status = "built" if report.status is None else report.status.value
            failed += report.status is not None
            print(f"{status:13s} {label} {report.reason[:200]}", flush=True)
    print(f"{len(jobs) - failed} built, {failed} not, in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
