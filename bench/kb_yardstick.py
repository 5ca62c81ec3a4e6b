"""The yardstick bench_reference.py holds reference + audit to (its goal):

    goal = worker start + 3 x (the cases' own input generation and eager forwards)

- ``worker_start_seconds``: a bare interpreter importing torch and the reference worker's
  modules, on cuda also creating the CUDA context;
- ``run_yardstick``: per case ``make_inputs(problem, seed)``, the eager forward and a
  synchronize, in a fresh process of its own (the first forward's library loads, cuBLAS or
  cuDNN, included: the worker pays them too); constructing the module is timed apart
  (``build_s``), not part of the goal.

Both run the harness of ``harness_root`` (first on the children's PYTHONPATH), the checkout
being measured.

    python bench/kb_yardstick.py PROBLEM.py [--device cpu|cuda] [--cases N]   # JSON on stdout
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def child_env(harness_root: Path) -> dict[str, str]:
    """This environment with ``harness_root`` first on PYTHONPATH."""
    path = os.pathsep.join(p for p in [str(harness_root), os.environ.get("PYTHONPATH", "")] if p)
    return dict(os.environ, PYTHONPATH=path)


def worker_start_seconds(device: str, harness_root: Path, runs: int = 3) -> list[float]:
    """Wall seconds of bare worker starts: interpreter, torch, the reference worker's modules,
    and on cuda the CUDA context, as the real worker needs before its first case."""
    code = "import torch, harness.sandbox.worker, harness.workers.reference"
    if device == "cuda":
        code += "; torch.zeros(1, device='cuda'); torch.cuda.synchronize()"
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=child_env(harness_root))
        times.append(time.perf_counter() - start)
    return times


def cases_yardstick(path: Path, device: str, cases: int) -> dict:
    """In this process: build the module once, then per case make_inputs + forward + sync."""
    import torch

    from harness.problem.cases import build_reference, make_inputs
    from harness.problem.load import problem_from_target

    problem = problem_from_target(str(path), device, "float32")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    start = time.perf_counter()
    module = build_reference(problem, 1)
    sync()
    build_s = time.perf_counter() - start
    case_s = []
    for seed in range(1, cases + 1):
        start = time.perf_counter()
        inputs = make_inputs(problem, seed)
        with torch.no_grad():
            outputs = module(*inputs)
        sync()
        case_s.append(time.perf_counter() - start)
        del inputs, outputs
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None
    return {"build_s": build_s, "case_s": case_s, "peak_bytes": peak}


def run_yardstick(path: Path, device: str, cases: int, harness_root: Path) -> dict:
    """``cases_yardstick`` in a fresh process (this file as a script); on failure, the error."""
    command = [sys.executable, __file__, str(path), "--device", device, "--cases", str(cases)]
    done = subprocess.run(command, capture_output=True, text=True, env=child_env(harness_root))
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-1500:]}"}
    return json.loads(lines[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("problem", type=Path, help="a KernelBench-format problem file")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--cases", type=int, default=9, help="how many cases to time")
    args = parser.parse_args()
    print(json.dumps(cases_yardstick(args.problem, args.device, args.cases)))


if __name__ == "__main__":
    main()
