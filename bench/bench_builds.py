"""``python -m bench builds``: a candidate's build time with and without precompiled torch
headers (``harness.builds.pch``), measured in one run on the same machine.

Each side builds ``--count`` distinct candidates (the same kernel with another constant: every
one is a new build) into a fresh cache through the parent's sandboxed builder, as an
evaluation does. With headers on, the first build also precompiles them for the rest; the
table shows it apart from the median of the others.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import click
import torch

from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.builds.cache import CPU_CFLAGS, CPU_LDFLAGS, spec_key
from harness.builds.requests import ParentBuilder
from harness.builds.store import BuildSpec
from harness.config import EvalConfig

CPP = """
torch::Tensor scaled(torch::Tensor x) {{
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  at::parallel_for(0, xc.numel(), 4096, [&](int64_t begin, int64_t end) {{
    for (int64_t i = begin; i < end; ++i) out[i] = in[i] * {factor}.0f;
  }});
  return y;
}}
"""
CUDA = """
__global__ void scale_kernel(const float* in, float* out, int64_t n) {{
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * {factor}.0f;
}}
torch::Tensor scaled(torch::Tensor x) {{
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  int64_t n = xc.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}}
"""


def spec(device: str, factor: int) -> BuildSpec:
    if device == "cpu":
        return BuildSpec(cpp=CPP.format(factor=factor), functions=["scaled"],
                         cflags=CPU_CFLAGS, ldflags=CPU_LDFLAGS, device="cpu")  # fmt: skip
    major, minor = torch.cuda.get_device_capability()
    return BuildSpec(
        cpp="torch::Tensor scaled(torch::Tensor x);", cuda=CUDA.format(factor=factor),
        functions=["scaled"], cflags=["-O3"], cuda_flags=["-O3"], device="cuda",
        arch=f"{major}.{minor}",
    )  # fmt: skip


def measure(device: str, count: int, headers: bool, first_factor: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-builds-") as cache:
        builder = ParentBuilder(
            Path(cache), EvalConfig().sandbox, 900, 2**36, precompiled_headers=headers
        )
        for number in range(count):
            wanted = spec(device, first_factor + number)
            with_headers = builder.store.headers(wanted) is not None
            started = time.perf_counter()
            built = builder.store.library(wanted, spec_key(wanted))
            seconds = time.perf_counter() - started
            if built.error is not None:
                raise click.ClickException(f"build failed: {built.error[-1500:]}")
            rows.append({"precompiled_headers": headers, "build": number + 1,
                         "seconds": round(seconds, 2), "used_headers": with_headers})  # fmt: skip
            print(f"headers {'on ' if headers else 'off'} build {number + 1}: {seconds:.1f} s",
                  flush=True)  # fmt: skip
    return rows


def table(record: BenchmarkRecord) -> str:
    def side(on: bool) -> list[dict]:
        return [row for row in record.rows if row["precompiled_headers"] is on]

    off, on = side(False), side(True)
    plain = statistics.median(row["seconds"] for row in off)
    later = [row["seconds"] for row in on if row["used_headers"]]
    lines = [
        "| build | headers off | headers on |",
        "|---|---|---|",
        f"| first (on: with precompiling) | {off[0]['seconds']:.1f} s | {on[0]['seconds']:.1f} s |",
        f"| median of all (off) / of those using them (on) | {plain:.1f} s | "
        + (f"{statistics.median(later):.1f} s |" if later else "none used them |"),
    ]
    if later:
        lines.append(f"\nlater builds: {plain / statistics.median(later):.2f}x faster")
    return "\n".join(lines)


@click.command(name="builds")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--count", default=4, show_default=True, help="Distinct candidates built per side.")
@out_option
def cli(device: str, count: int, out: Path | None) -> None:
    """A candidate's build time with and without precompiled torch headers, one run."""
    record = new_record("builds", device)
    record.rows += measure(device, count, False, 10)
    record.rows += measure(device, count, True, 100)
    finish(record, out, table)
