"""Benchmark the offline proposer: eager vs torch.compile vs kernelpilot's fused kernel.

Runs the examples and a set of pointwise chains through the full pipeline (propose, verify,
time) on one device, and reports times, speedups and the fraction of measured copy bandwidth
that the fused kernel reaches on the pure pointwise chains (bytes: each input read once, the
output written once).

    python -m bench offline [--device auto|cpu|cuda] [--out FILE] [--time-budget S]
        [--no-compile-baseline] [--only NAME ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import click

from agents.optimize import optimize_problem
from bench.results_format import BenchmarkRecord, finish, new_record, out_option, write_record
from bot.report import TargetReport, TargetStatus
from harness.config import EvalConfig
from harness.devices import copy_bandwidth_gbs, resolve_device
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target

ROOT = Path(__file__).resolve().parent.parent

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


def target_names() -> list[str]:
    return [name for name, _ in example_targets()] + [f"chain_{name}" for name in CHAINS]


@click.command("offline")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto")
@out_option
@click.option("--time-budget", type=click.FloatRange(min=0, min_open=True), default=1.0,
              show_default=True, help="Timing budget per implementation, seconds.")  # fmt: skip
@click.option("--no-compile-baseline", is_flag=True, help="Do not time torch.compile.")
@click.option("--only", multiple=True, type=click.Choice(target_names()), metavar="NAME",
              help=f"Run only this target (repeatable): {', '.join(target_names())}.")  # fmt: skip
def cli(
    device: str, out: Path | None, time_budget: float, no_compile_baseline: bool, only: tuple
) -> None:
    """Eager vs torch.compile vs kernelpilot's kernel on the examples and pointwise chains."""
    device = resolve_device(device)
    # a copy of 2**28 (cuda) or 2**25 (cpu) float32 elements: its bytes read plus written
    bandwidth = copy_bandwidth_gbs(device, 8 * ((1 << 28) if device == "cuda" else (1 << 25)))
    config = EvalConfig(time_budget_s=time_budget, compile_baseline=not no_compile_baseline)
    evaluator = Evaluator(config, seed=1, progress=lambda m: print(f"  .. {m}", file=sys.stderr))
    folder = Path(tempfile.mkdtemp(prefix="kp-bench-"))
    targets = [(name, target, None) for name, target in example_targets()]
    targets += chain_problems(device, folder)
    targets = [t for t in targets if not only or t[0] in only]
    record = new_record("offline", device, context={"copy_bandwidth_gbs": bandwidth})
    try:
        for name, target, min_bytes in targets:
            problem = problem_from_target(target, device, "float32")
            attempt = optimize_problem(problem, evaluator)
            record.rows.append(_row(name, attempt, min_bytes, bandwidth))
            print(json.dumps(record.rows[-1]), file=sys.stderr)
            if out:  # after each target: a run stopped later keeps what it measured
                write_record(record, out)
    except KeyboardInterrupt:
        print(render(record))
        print(f"\nstopped after {len(record.rows)} of {len(targets)} targets", file=sys.stderr)
        sys.exit(130)
    finish(record, out, render)


def _row(name: str, attempt, min_bytes: int | None, bandwidth: float) -> dict:
    """The report's own record of the target (bot.report), plus the share of copy bandwidth."""
    if attempt.result is None:
        record = TargetReport.failed(
            name, attempt.problem.device, TargetStatus.no_candidate, attempt.reason
        )
    else:
        record = TargetReport.from_result(name, attempt.result, None)
    timings, vs_eager = record.timings, record.vs_eager
    row = {
        "target": record.target,
        "status": record.status.value,
        "reason": record.reason,
        "eager_ms": timings.eager.median_ms if timings.eager else None,
        "compile_ms": timings.compiled.median_ms if timings.compiled else None,
        "candidate_ms": timings.candidate.median_ms if timings.candidate else None,
        "speedup_vs_eager": record.speedup_vs_eager,
        "speedup_vs_compile": record.speedup_vs_compile,
        "faster_than_eager": bool(vs_eager and vs_eager.faster),
        "slower_than_eager": bool(vs_eager and vs_eager.slower),
    }
    row["reason"] = row["reason"][:200]
    if min_bytes and row["candidate_ms"]:
        achieved = min_bytes / (row["candidate_ms"] / 1e3) / 1e9
        row.update(achieved_gbs=achieved, fraction_of_copy_bw=achieved / bandwidth)
    return row


def render(record: BenchmarkRecord) -> str:
    def cell(value, fmt):
        return "-" if value is None else format(value, fmt)

    lines = [
        f"device: {record.device_name} ({record.device}), torch {record.torch}, "
        f"copy bandwidth {record.context['copy_bandwidth_gbs']:.0f} GB/s",
        "",
        "| target | status | eager ms | compile ms | kernel ms | vs eager | vs compile | % copy BW |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in record.rows:
        fraction = row.get("fraction_of_copy_bw")
        lines.append(
            f"| {row['target']} | {row['status']} | {cell(row.get('eager_ms'), '.3f')} | "
            f"{cell(row.get('compile_ms'), '.3f')} | {cell(row.get('candidate_ms'), '.3f')} | "
            f"{cell(row.get('speedup_vs_eager'), '.2f')} | {cell(row.get('speedup_vs_compile'), '.2f')} | "
            f"{'-' if fraction is None else f'{100 * fraction:.0f}%'} |"
        )
    return "\n".join(lines)
