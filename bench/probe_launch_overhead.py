"""Does something the candidate worker does between timing eager alone and timing it beside the
candidate make every later call slower? Replays the worker's steps one at a time in one process
(a CPU-only profiler session, FlopCounterMode, a CUDA IPC export, a busy non-default stream, a
CUDA profiler session) and times the reference with the harness's own timer after each.

    python bench/probe_launch_overhead.py [--problem FILE] [--calls N] [--out FILE]

Run it twice: as is, and with TEARDOWN_CUPTI=1 (Kineto then finalizes CUPTI after a session).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from harness import handover, profiling  # noqa: E402
from harness.cases import build_reference, make_inputs  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402
from harness.timing import Timer  # noqa: E402


def timed(model, problem, calls: int) -> dict:
    timer = Timer("cuda")
    samples = []
    with torch.no_grad():
        for seed in range(calls):
            inputs = make_inputs(problem, seed + 1)
            elapsed, _ = timer(model, inputs)
            samples.append(elapsed * 1e3)
    samples.sort()
    return {"median_us": statistics.median(samples), "min_us": samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", default="tests/redteam/problems/layernorm_residual.py")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    problem = problem_from_target(str(ROOT / args.problem), "cuda", "float32")
    model = build_reference(problem, 1)
    inputs = make_inputs(problem, 1)
    keep: list = []

    def cpu_profile():
        profiling.profile_forward(model, inputs, "cuda", kernels=False)

    def flops():
        with FlopCounterMode(display=False):
            model(*inputs)

    def ipc_export():
        handover.send([model(*inputs)], Path("/tmp"), 0, "ipc", keep)

    def side_stream():
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            model(*inputs)
        torch.cuda.current_stream().wait_stream(stream)

    others: list = []

    def other_process():  # a second process with a CUDA context, idle (as the comparator is)
        code = "import torch,sys,time; torch.zeros(1, device='cuda'); print('up', flush=True); time.sleep(900)"
        other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert other.stdout is not None and other.stdout.readline().strip() == "up"
        others.append(other)

    def cuda_profile():
        profiling.profile_forward(model, inputs, "cuda", kernels=True)

    steps = [
        ("start", lambda: None),
        ("again", lambda: None),
        ("cpu profiler session", cpu_profile),
        ("cpu profiler session x10", lambda: [cpu_profile() for _ in range(10)]),
        ("FlopCounterMode", flops),
        ("another CUDA process, idle", other_process),
        ("CUDA IPC export", ipc_export),
        ("non-default stream", side_stream),
        ("CUDA profiler session", cuda_profile),
        ("after, again", lambda: None),
    ]
    rows = []
    with torch.no_grad():
        for name, step in steps:
            step()
            torch.cuda.synchronize()
            row = {"after": name, **timed(model, problem, args.calls)}
            rows.append(row)
            print(
                f"{name:<28} median {row['median_us']:7.1f} us  fastest {row['min_us']:7.1f} us",
                flush=True,
            )
    for other in others:
        other.kill()
    record = {
        "TEARDOWN_CUPTI": os.environ.get("TEARDOWN_CUPTI"),
        "torch": torch.__version__,
        "problem": args.problem,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
