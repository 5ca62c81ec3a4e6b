"""Which device a run uses, and whether the tools to build kernels for it are present."""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from harness.errors import UserError

if TYPE_CHECKING:
    from harness.workers.timers import Timer


def resolve_device(requested: str) -> str:
    """'auto' picks cuda when a GPU is visible; an explicit request is checked."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise UserError(
            "--device cuda, but PyTorch sees no CUDA GPU",
            where=f"torch {torch.__version__} (CUDA build: {torch.version.cuda or 'no'})",
            fix="run on a GPU machine with a CUDA build of torch, or use --device cpu",
        )
    if requested not in ("cpu", "cuda"):
        raise UserError(f"unknown device {requested!r}", fix="use auto, cpu or cuda")
    return requested


def device_name(device: str) -> str:
    """The device's model as the reports show it: the GPU's name, else the CPU's model name."""
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check_toolchain(device: str) -> None:
    """Fail early, with what to install, when kernels for ``device`` cannot be compiled."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise UserError(
            f"no C++ compiler ({compiler!r} is not on PATH)",
            fix="install g++ (apt-get install g++) or set CXX to your compiler",
        )
    if device == "cuda" and _nvcc() is None:
        raise UserError(
            "no nvcc: CUDA kernels cannot be compiled",
            where=f"CUDA_HOME={os.environ.get('CUDA_HOME', '(unset)')}",
            fix="install the CUDA toolkit matching torch.version.cuda, or set CUDA_HOME",
        )


def _nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


# How long a ceiling is timed: at least MIN_REPS calls, then until BUDGET_S of timed calls (or
# MAX_REPS) have passed, after WARMUP calls thrown away.
CEILING_WARMUP, CEILING_MIN_REPS, CEILING_MAX_REPS, CEILING_BUDGET_S = 2, 5, 200, 0.5


def copy_bandwidth_gbs(device: str, io_bytes: int) -> float:
    """The rate, GB/s, of the fastest of several copies that move ``io_bytes`` (half read, half
    written), measured the way a candidate's kernel is: the ceiling its own bytes (inputs read
    plus outputs written) are set against in the planner's feedback.

    The same timer (perf_counter on cpu; CUDA events after an L2 flush on cuda), the same
    thread count (torch's default, in a worker like the timing worker), the same bytes, and a
    source written just before each call, as a timed call's inputs are drawn just before it.
    So a kernel whose few megabytes stay in cache meets a copy that stays in cache too, and one
    that streams gigabytes from memory a copy that does the same: a 128 MB copy as the ceiling
    of a small kernel read as "131% of copy bandwidth" (issue 26). The copy writes into memory
    it wrote before, where a kernel allocates its outputs (on cpu, maybe new pages faulted in
    on first write): leaving that out keeps the copy an upper bound.
    """
    from harness.workers.timers import Timer  # the kernel's timer (it loads the CUDA runtime)

    numel = max(1, io_bytes // 8)  # float32 elements on each side
    source, target = torch.empty(numel, device=device), torch.zeros(numel, device=device)
    fastest_ms = _timed(Timer(device), target.copy_, lambda rep: [source.fill_(rep)])
    return 8 * numel / (fastest_ms / 1e3) / 1e9


def matmul_tflops(device: str, dtype: str) -> float:
    """The device's matrix-multiply rate in ``dtype``, TFLOP/s: square products large enough to
    run near the device's peak (4096 on cuda, 1024 on cpu), timed by the kernel's timer with
    the same thread count, operands drawn again before each call: the ceiling a compute-bound
    kernel is measured against."""
    from harness.workers.timers import Timer

    size = 4096 if device == "cuda" else 1024
    kind = getattr(torch, dtype)
    a = torch.empty(size, size, device=device, dtype=kind)
    b = torch.empty(size, size, device=device, dtype=kind)

    fastest_ms = _timed(Timer(device), torch.matmul, lambda rep: [a.normal_(), b.normal_()])
    return 2 * size**3 / (fastest_ms / 1e3) / 1e12


def _timed(timer: Timer, fn: Callable, inputs: Callable[[int], list]) -> float:
    """The fastest, in milliseconds, of ``fn(*inputs(rep))`` timed by ``timer``, after warm-up
    calls thrown away; ``inputs`` is called outside the timed region. The fastest, where a
    kernel is judged by its median: other work on the machine only ever slows a call, and a
    ceiling read from a slowed copy (the median on a loaded 2-core machine) fell below a kernel
    timed at a quieter moment."""
    for rep in range(CEILING_WARMUP):
        timer(fn, inputs(rep))
    samples: list[float] = []
    while len(samples) < CEILING_MIN_REPS or (
        sum(samples) < CEILING_BUDGET_S * 1e3 and len(samples) < CEILING_MAX_REPS
    ):
        samples.append(timer(fn, inputs(len(samples))).ms)
    return min(samples)
