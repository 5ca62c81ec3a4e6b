"""Benchmark the offline proposer: eager vs torch.compile vs kernelpilot's fused kernel.

Runs the examples and a set of pointwise chains through the full pipeline (propose, verify,
time) on one device, and reports times, speedups and the fraction of measured copy bandwidth
that the fused kernel reaches on the pure pointwise chains (bytes: each input read once, the
output written once).

    python bench/bench_offline.py [--device auto|cpu|cuda] [--out bench/results/run.json]
        [--time-budget S] [--no-compile-baseline] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.optimize import optimize_problem  # noqa: E402
from bot.report import TargetReport  # noqa: E402
from harness.config import EvalConfig  # noqa: E402
from harness.devices import copy_bandwidth_gbs, resolve_device  # noqa: E402
from harness.evaluate import Evaluator  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402

# The examples as optimize targets (the repository-style one through its [tool.kernelpilot]).
EXAMPLES = [
    "examples/fused_gelu_block.py",
    "examples/swiglu.py",
    "examples/repo_style/blocks.py:ResidualGate",
]

# name -> (forward body over x, y, b; number of full-size tensor inputs)
CHAINS = {
    "bias_gelu": ("F.gelu(x + b)", 1),
    "bias_gelu_tanh_residual": ("(F.gelu(x + b, approximate='tanh') + y) * 0.5", 2),
    "swiglu": ("F.silu(x) * y", 2),
    "sigmoid_gate_clamp": ("torch.clamp(torch.sigmoid(x) * y + b, -1.0, 1.0)", 2),
    "exp_log_chain": ("torch.log(torch.exp(x * 0.1) + 1.0) - torch.tanh(y) * 0.5", 2),
}
TEMPLATE = """import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y, b):
        return {body}


def get_inputs():
    return [torch.randn({rows}, {cols}), torch.randn({rows}, {cols}), torch.randn({cols})]


def get_init_inputs():
    return []
"""


def chain_problems(device: str, folder: Path) -> list[tuple[str, str, int]]:
    rows, cols = (8192, 8192) if device == "cuda" else (1024, 2048)
    problems = []
    for name, (body, full_inputs) in CHAINS.items():
        path = folder / f"{name}.py"
        path.write_text(TEMPLATE.format(body=body, rows=rows, cols=cols))
        # Minimum traffic: x and y read (when used), b negligible, one output written.
        min_bytes = (full_inputs + 1) * rows * cols * 4
        problems.append((f"chain_{name}", str(path), min_bytes))
    return problems


def example_targets() -> list[tuple[str, str]]:
    """(name, target with an absolute path) of each example: the class name, or the file's."""
    found = []
    for target in EXAMPLES:
        path, _, cls = target.partition(":")
        found.append((cls or Path(path).stem, str(ROOT / path) + (f":{cls}" if cls else "")))
    return found


def main() -> None:
    names = [name for name, _ in example_targets()] + [f"chain_{name}" for name in CHAINS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    parser.add_argument(
        "--out", type=Path, default=None, help="Write the rows as JSON here (after each target)."
    )
    parser.add_argument("--time-budget", type=float, default=1.0)
    parser.add_argument("--no-compile-baseline", action="store_true")
    parser.add_argument(
        "--only",
        action="append",
        choices=names,
        metavar="NAME",
        help=f"Run only this target (repeatable): {', '.join(names)}.",
    )
    args = parser.parse_args()
    device = resolve_device(args.device)
    bandwidth = copy_bandwidth_gbs(device, (1 << 28) if device == "cuda" else (1 << 25))
    config = EvalConfig(
        time_budget_s=args.time_budget, compile_baseline=not args.no_compile_baseline
    )
    evaluator = Evaluator(config, seed=1, progress=lambda m: print(f"  .. {m}", file=sys.stderr))
    folder = Path(tempfile.mkdtemp(prefix="kp-bench-"))
    targets = [(name, target, None) for name, target in example_targets()]
    targets += chain_problems(device, folder)
    targets = [t for t in targets if not args.only or t[0] in args.only]
    header = {
        "device": device,
        "device_name": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "copy_bandwidth_gbs": bandwidth,
    }
    rows: list[dict] = []
    try:
        for name, target, min_bytes in targets:
            problem = problem_from_target(target, device, "float32")
            attempt = optimize_problem(problem, evaluator)
            rows.append(_row(name, attempt, min_bytes, bandwidth))
            print(json.dumps(rows[-1]), file=sys.stderr)
            if args.out:  # after each target: a run stopped later keeps what it measured
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(json.dumps({"header": header, "rows": rows}, indent=2))
    except KeyboardInterrupt:
        print(render(header, rows))
        print(f"\nstopped after {len(rows)} of {len(targets)} targets", file=sys.stderr)
        sys.exit(130)
    print(render(header, rows))


def _row(name: str, attempt, min_bytes: int | None, bandwidth: float) -> dict:
    """The report's own record of the target (bot.report), plus the share of copy bandwidth."""
    if attempt.result is None:
        record = TargetReport.failed(name, attempt.problem.device, "no_candidate", attempt.reason)
    else:
        record = TargetReport.from_result(name, attempt.result, None)
    row = record.model_dump(
        include={
            "target",
            "status",
            "reason",
            "eager_ms",
            "compile_ms",
            "candidate_ms",
            "speedup_vs_eager",
            "speedup_vs_compile",
            "faster_than_eager",
            "slower_than_eager",
        }
    )
    row["reason"] = row["reason"][:200]
    if min_bytes and record.candidate_ms:
        achieved = min_bytes / (record.candidate_ms / 1e3) / 1e9
        row.update(achieved_gbs=achieved, fraction_of_copy_bw=achieved / bandwidth)
    return row


def render(header: dict, rows: list[dict]) -> str:
    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = [
        f"device: {header['device_name']} ({header['device']}), torch {header['torch']}, "
        f"CUDA {header['cuda']}, copy bandwidth {header['copy_bandwidth_gbs']:.0f} GB/s",
        "",
        "| target | status | eager ms | compile ms | kernel ms | vs eager | vs compile | % copy BW |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        fraction = row.get("fraction_of_copy_bw")
        lines.append(
            f"| {row['target']} | {row['status']} | {cell(row.get('eager_ms'), '.3f')} | "
            f"{cell(row.get('compile_ms'), '.3f')} | {cell(row.get('candidate_ms'), '.3f')} | "
            f"{cell(row.get('speedup_vs_eager'), '.2f')} | {cell(row.get('speedup_vs_compile'), '.2f')} | "
            f"{'-' if fraction is None else f'{100 * fraction:.0f}%'} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
