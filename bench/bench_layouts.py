"""Where eager's and torch.compile's time goes on KernelBench-style problems, and what a
channels-last layout changes: each problem's module timed as eager, as eager with its input
made channels-last on every call (with the module's weights as they are, then made channels-last once), and compiled, on
the same inputs; each one's largest kernels from one profiled call.

    python -m bench layouts PROBLEM.py... [--calls N] [--out FILE]

A problem file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()`` (KernelBench's
form). Times are CUDA-event medians of ``--calls`` calls after a warm-up, the input's layout
change included in the channels-last row (a candidate pays it too)."""

from __future__ import annotations

import copy as copy_module
import importlib.util
import json
import statistics
from pathlib import Path

import click
import torch

from bench.kb_files import problem_name
from harness.workers.profiling import profile_forward

CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"kb_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _median_ms(fn, inputs: list, calls: int) -> float:
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _channels_last(model):
    def forward(*inputs):
        return model(*(_as_channels_last(x) for x in inputs))

    return forward


def _weights_channels_last(model):
    copy = copy_module.deepcopy(model)
    for parameter in copy.parameters():
        parameter.data = _as_channels_last(parameter.data)
    return copy


def _as_channels_last(value):
    if isinstance(value, torch.Tensor) and value.dim() in CHANNELS_LAST:
        return value.contiguous(memory_format=CHANNELS_LAST[value.dim()])
    return value


def measure(path: Path, calls: int) -> dict:
    source = _load(path)
    torch.manual_seed(0)
    model = source.Model(*source.get_init_inputs()).cuda().eval()
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in source.get_inputs()]
    ways = {
        "eager": model,
        "eager, channels-last input": _channels_last(model),
        "eager, channels-last input and weights": _channels_last(_weights_channels_last(model)),
        "torch.compile": torch.compile(model),
    }
    row: dict = {"problem": problem_name(path), "ms": {}, "kernels": {}}
    with torch.no_grad():
        reference = model(*inputs)
        for name, fn in ways.items():
            got = fn(*inputs)
            row.setdefault("max_abs_diff", {})[name] = float((got - reference).abs().max())
            row["ms"][name] = round(_median_ms(fn, inputs, calls), 4)
            profile = profile_forward(fn, inputs, "cuda")
            row["kernels"][name] = [(k, round(us, 1)) for k, us in profile.breakdown]
    return row


@click.command(help=__doc__)
@click.argument("problems", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--calls", default=20, show_default=True, help="Timed calls per way, median.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="JSON rows.")
def cli(problems: tuple[Path, ...], calls: int, out: Path | None) -> None:
    if not torch.cuda.is_available():
        raise click.UsageError("layouts measures CUDA kernels: no CUDA device here")
    print(
        f"torch {torch.__version__}, {torch.cuda.get_device_name()}, cudnn.allow_tf32="
        f"{torch.backends.cudnn.allow_tf32}, matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}"
    )
    rows = []
    for path in problems:
        row = measure(path, calls)
        rows.append(row)
        eager = row["ms"]["eager"]
        print(f"\n{row['problem']}")
        for name, ms in row["ms"].items():
            print(f"  {name:<28} {ms:9.3f} ms  {eager / ms:5.2f}x eager")
            for kernel, us in row["kernels"][name][:5]:
                print(f"      {us:10.1f} us  {kernel[:100]}")
        if out is not None:
            out.write_text(json.dumps(rows, indent=1))
