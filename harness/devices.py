"""Which device a run uses, and whether the tools to build kernels for it are present."""

from __future__ import annotations

import os
import platform
import shutil
from pathlib import Path

import torch

from harness.errors import UserError


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


def copy_bandwidth_gbs(device: str, numel: int) -> float:
    """The device's copy bandwidth, bytes read plus bytes written, GB/s: the median of ten
    copies of ``numel`` float32 (after three to warm up), a size well past the caches."""
    import time

    import torch

    source = torch.randn(numel, device=device)
    target = torch.empty_like(source)
    for _ in range(3):
        target.copy_(source)
    times = []
    for _ in range(10):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        target.copy_(source)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    times.sort()
    return 2 * source.numel() * source.element_size() / times[len(times) // 2] / 1e9


def matmul_tflops(device: str, dtype: str) -> float:
    """The device's matrix-multiply rate in ``dtype`` (TFLOP/s, the median of five square
    products after a warm-up): the ceiling a compute-bound kernel is measured against."""
    import time

    import torch

    size = 4096 if device == "cuda" else 1024
    kind = getattr(torch, dtype)
    a = torch.randn(size, size, device=device, dtype=kind)
    b = torch.randn(size, size, device=device, dtype=kind)
    a @ b
    times = []
    for _ in range(5):
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        a @ b
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    times.sort()
    return 2 * size**3 / times[len(times) // 2] / 1e12
