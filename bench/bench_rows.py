"""``python -m bench rows``: the offline proposer's row kernel (a softmax over the last
dimension, or a row's L1 norm dividing it) against eager and torch.compile, over row
widths that take each of its paths.

Per width: a module of the ``--kind`` (``torch.softmax(x, -1)``; ``l1_norm``, KernelBench's
``x / torch.mean(torch.abs(x), dim=-1, keepdim=True)``) of about ``--elements`` values, proposed by the
offline proposer for the device (row kernels opened to every width and device), built in this
process (trusted: kernelpilot's own generated source), checked against eager on the timed
input, then eager, compiled and candidate timed with the harness's timer (fresh inputs, L2
flushed, median). Effective bandwidth counts the least traffic each needs: its input read
once and its output written once.

\b
    python -m bench rows --device cuda --widths 1024,8192,20000,50257,393216 --out rows.json
    python -m bench rows --device cuda --kind l1_norm --widths 1024,4096,16384,65535
"""

from __future__ import annotations

import importlib.util
import statistics
import tempfile
from pathlib import Path

import click
import torch

from agents.offline import propose_here
from agents.offline import rows as row_kernels
from bench.results_format import new_record, out_option, write_record
from harness.problem.load import problem_from_target
from harness.workers.timers import Timer

_MODULE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn({rows}, {width})]
"""


# Each kind: the module's forward as written in its source, and the same as eager's function.
KINDS = {
    "softmax": ("torch.softmax(x, -1)", lambda x: torch.softmax(x, -1)),
    "log_softmax": ("torch.log_softmax(x, -1)", lambda x: torch.log_softmax(x, -1)),
    "l1_norm": (  # KernelBench level 1, 38_L1Norm_
        "x / torch.mean(torch.abs(x), dim=-1, keepdim=True)",
        lambda x: x / torch.mean(torch.abs(x), dim=-1, keepdim=True),
    ),
}


@click.command(help=__doc__)
@click.option("--device", default="cuda", show_default=True, help="cuda (or cpu).")
@click.option(
    "--widths",
    default="1024,8192,20000,50257,393216",
    show_default=True,
    help="Row widths, comma-separated.",
)
@click.option(
    "--elements", default=2**28, show_default=True, help="Values per input, about (rows x width)."
)
@click.option("--kind", type=click.Choice(sorted(KINDS)), default="softmax", show_default=True)
@click.option("--dtype", type=click.Choice(["float32", "bfloat16"]), default="float32")
@click.option("--calls", default=20, show_default=True, help="Timed calls per side.")
@out_option
def cli(
    device: str, widths: str, elements: int, kind: str, dtype: str, calls: int, out: Path | None
) -> None:
    # Every width measured, also those the proposer leaves to PyTorch (agents.offline.rows).
    row_kernels.ROW_DEVICES, row_kernels.ROW_MIN_WIDTH = {device}, 1
    row_kernels.SUM_MIN_WIDTH = 1
    record = new_record("rows", device, context={"kind": kind, "dtype": dtype})
    timer = Timer(device)
    with tempfile.TemporaryDirectory() as scratch:
        for width in (int(item) for item in widths.split(",")):
            rows = max(1, elements // width)
            row = _measure(Path(scratch), device, kind, dtype, rows, width, timer, calls)
            record.rows.append(row)
            if out is not None:
                write_record(record, out)
            click.echo(
                f"{rows} x {width}: eager {row['eager_us']:.0f} us, compile "
                f"{row['compile_us']:.0f} us, kernel {row['candidate_us']:.0f} us "
                f"({row['candidate_gbs']:.0f} GB/s): {row['vs_eager']:.2f}x eager, "
                f"{row['vs_compile']:.2f}x compile"
            )
    timer.close()


def _measure(scratch: Path, device, kind, dtype, rows, width, timer, calls) -> dict:
    source = scratch / f"{kind}_{rows}_{width}.py"
    forward, function = KINDS[kind]
    source.write_text(_MODULE.format(forward=forward, rows=rows, width=width))
    problem = problem_from_target(f"{source}:Model", device, dtype)
    proposal = propose_here(problem)
    if proposal.candidate is None:
        raise click.ClickException(f"{rows} x {width}: no candidate ({proposal.reason})")
    path = scratch / f"candidate_{rows}_{width}.py"
    path.write_text(proposal.candidate.source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    candidate = module.ModelNew().to(device)
    eager = torch.nn.Module()
    eager.forward = function  # type: ignore[method-assign]
    compiled = torch.compile(eager.forward)
    torch_dtype = getattr(torch, dtype)

    def fresh() -> list:
        return [torch.randn(rows, width, device=device, dtype=torch_dtype)]

    with torch.no_grad():
        check = fresh()
        torch.testing.assert_close(candidate(*check), eager(*check), rtol=1e-5, atol=1e-6)
        times = {}
        for name, fn in (("eager", eager), ("compile", compiled), ("candidate", candidate)):
            for _ in range(3):
                fn(*fresh())  # warm up (compile's first call compiles)
            times[name] = statistics.median(timer(fn, fresh()).ms for _ in range(calls))
    bytes_moved = 2 * rows * width * torch_dtype.itemsize
    return {
        "rows": rows,
        "width": width,
        "eager_us": times["eager"] * 1e3,
        "compile_us": times["compile"] * 1e3,
        "candidate_us": times["candidate"] * 1e3,
        "candidate_gbs": bytes_moved / (times["candidate"] * 1e-3) / 1e9,
        "vs_eager": times["eager"] / times["candidate"],
        "vs_compile": times["compile"] / times["candidate"],
    }
