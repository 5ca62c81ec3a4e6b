"""``python -m bench builds``: a candidate's build time with and without precompiled torch
headers (``harness.builds.pch``), measured in one run on the same machine.

Each side builds ``--count`` distinct candidates (the same kernel with another constant: every
one is a new build) into a fresh cache through the parent's sandboxed builder, as an
evaluation does. With headers on, the first build also precompiles them for the rest; the
table shows it apart from the median of the others. On cuda, ``--form`` picks how the candidate
is written: ``torch`` (the tensor wrapper in the ``.cu`` file, torch's headers put first, as
most CUDA extensions are) or ``split`` (a ``.cu`` file of the kernel and a launch function of
raw pointers, the wrapper in ``cpp_sources``, ``no_implicit_headers=True``: the offline
proposer's form, ``agents.offline.cuda_launch``).
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


SPLIT_CPP = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
void scale_launch(const float* in, float* out, int64_t n, cudaStream_t stream);
torch::Tensor scaled(torch::Tensor x) {
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  scale_launch(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
               at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
SPLIT_CUDA = """
#include <cuda_runtime.h>
#include <cstdint>
__global__ void scale_kernel(const float* in, float* out, int64_t n) {{
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * {factor}.0f;
}}
void scale_launch(const float* in, float* out, int64_t n, cudaStream_t stream) {{
  scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(in, out, n);
}}
"""
FORMS = ("torch", "split")


def spec(device: str, factor: int, form: str = "torch") -> BuildSpec:
    if device == "cpu":
        return BuildSpec(cpp=CPP.format(factor=factor), functions=["scaled"],
                         cflags=CPU_CFLAGS, ldflags=CPU_LDFLAGS, device="cpu")  # fmt: skip
    major, minor = torch.cuda.get_device_capability()
    split = form == "split"
    return BuildSpec(
        cpp=SPLIT_CPP if split else "torch::Tensor scaled(torch::Tensor x);",
        cuda=(SPLIT_CUDA if split else CUDA).format(factor=factor), functions=["scaled"],
        cflags=["-O3"], cuda_flags=["-O3"], device="cuda", arch=f"{major}.{minor}",
        implicit_headers=not split,
    )  # fmt: skip


def measure(device: str, count: int, headers: bool, first_factor: int, form: str) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-builds-") as cache:
        builder = ParentBuilder(
            Path(cache), EvalConfig().sandbox, 900, 2**36, precompiled_headers=headers
        )
        for number in range(count):
            wanted = spec(device, first_factor + number, form)
            with_headers = builder.store.headers(wanted) is not None
            started = time.perf_counter()
            built = builder.store.library(wanted, spec_key(wanted))
            seconds = time.perf_counter() - started
            if built.error is not None:
                raise click.ClickException(f"build failed: {built.error[-1500:]}")
            rows.append({"form": form, "precompiled_headers": headers, "build": number + 1,
                         "seconds": round(seconds, 2), "used_headers": with_headers})  # fmt: skip
            print(f"{form}: headers {'on ' if headers else 'off'} build {number + 1}: "
                  f"{seconds:.1f} s", flush=True)  # fmt: skip
    return rows


def table(record: BenchmarkRecord) -> str:
    lines = [
        "| form | build | headers off | headers on |",
        "|---|---|---|---|",
    ]
    notes = []
    for form in dict.fromkeys(row.get("form", "torch") for row in record.rows):
        rows = [row for row in record.rows if row.get("form", "torch") == form]
        off = [row for row in rows if not row["precompiled_headers"]]
        on = [row for row in rows if row["precompiled_headers"]]
        later = [row["seconds"] for row in on if row["used_headers"]]
        plain = statistics.median(row["seconds"] for row in off) if off else None
        first = [f"{side[0]['seconds']:.1f} s" if side else "-" for side in (off, on)]
        lines.append(f"| {form} | first (on: with precompiling) | {first[0]} | {first[1]} |")
        lines.append(
            f"| {form} | median of all (off) / of those using them (on) | "
            + (f"{plain:.1f} s" if plain is not None else "-")
            + " | "
            + (f"{statistics.median(later):.1f} s |" if later else "none used them |")
        )
        if later and plain is not None:
            notes.append(f"{form}, later builds: {plain / statistics.median(later):.2f}x faster")
    return "\n".join(lines + ([""] + notes if notes else []))


@click.command(name="builds")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--count", default=4, show_default=True, help="Distinct candidates built per side.")
@click.option(
    "--form",
    "forms",
    type=click.Choice(FORMS),
    multiple=True,
    help="cuda: how the candidate is written (repeat for both) [default: torch].",
)
@click.option(
    "--headers",
    type=click.Choice(["off", "on", "both"]),
    default="both",
    show_default=True,
    help="Which sides to build: without, with precompiled torch headers, or both.",
)
@out_option
def cli(device: str, count: int, forms: tuple[str, ...], headers: str, out: Path | None) -> None:
    """A candidate's build time with and without precompiled torch headers, one run."""
    if device == "cpu" and set(forms) - {"torch"}:
        raise click.UsageError("--form split is a CUDA candidate's form: use --device cuda")
    record = new_record("builds", device)
    for number, form in enumerate(forms or ("torch",)):
        if headers in ("off", "both"):
            record.rows += measure(device, count, False, 10 + 1000 * number, form)
        if headers in ("on", "both"):
            record.rows += measure(device, count, True, 100 + 1000 * number, form)
    finish(record, out, table)
