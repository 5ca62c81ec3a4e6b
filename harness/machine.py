"""The machine kernels run on, as a kernel writer needs it: on cpu the cores a worker may use,
the vector instruction sets and the caches; on cuda the GPU's architecture and its limits.

Read in kernelpilot's own process, from what the OS and the CUDA driver report (no PR code
runs for it): ``/proc/cpuinfo`` and ``/sys/devices/system/cpu/cpu0/cache`` on Linux, and
``torch.cuda.get_device_properties``. Candidate workers inherit this process's CPU affinity,
so the CPUs counted here are the ones a kernel's threads get; on cuda every worker uses the
first visible GPU, the one described.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from harness.devices import device_name

# The instruction-set flags a kernel writer picks code paths by (x86 /proc/cpuinfo "flags",
# Arm "Features"), in the order they are shown; the rest of the list says nothing to a kernel.
ISA_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq", "avx512bw", "avx512vl",
    "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8",
    "asimd", "asimdhp", "asimddp", "sve", "sve2", "bf16", "i8mm", "sme",
)  # fmt: skip
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


class CpuCache(BaseModel):
    """One level of cpu0's caches."""

    name: str = Field(description="L1d, L2, L3.")
    size_kib: int
    shared_by: int = Field(description="Logical CPUs that share one such cache.")


class Machine(BaseModel):
    """What the kernels run on. Fields the OS or the driver did not report are None/empty."""

    device: str = Field(description="'cpu' or 'cuda'.")
    name: str = Field(description="The CPU's model name, or the GPU's.")
    cpus: int | None = Field(
        default=None, description="Logical CPUs this process (and so every worker) may run on."
    )
    threads_per_core: int | None = Field(
        default=None, description="Logical CPUs per physical core (SMT siblings of cpu0)."
    )
    isa: list[str] = Field(default_factory=list, description="Vector ISA flags (ISA_FLAGS).")
    caches: list[CpuCache] = Field(default_factory=list)
    capability: str | None = Field(default=None, description="CUDA compute capability, '9.0'.")
    sms: int | None = Field(default=None, description="Streaming multiprocessors.")
    shared_per_block_kib: int | None = Field(
        default=None, description="Shared memory a block gets without opting in."
    )
    shared_per_block_optin_kib: int | None = Field(
        default=None,
        description="Shared memory a block may get with cudaFuncSetAttribute (opt-in).",
    )
    shared_per_sm_kib: int | None = None
    registers_per_sm: int | None = None
    threads_per_sm: int | None = None
    l2_mib: float | None = None
    memory_gib: float | None = None


def _threads_per_core() -> int | None:
    """How many logical CPUs share cpu0's core ("0-1", "0,4" or "0": one)."""
    try:
        listed = (CACHE_DIR.parent / "topology" / "thread_siblings_list").read_text().strip()
    except OSError:
        return None
    count = 0
    for part in listed.split(","):
        low, _, high = part.partition("-")
        count += int(high) - int(low) + 1 if high else 1
    return count


def describe_machine(device: str) -> Machine:
    """The machine a run on ``device`` times its kernels on (module docstring: where from)."""
    if device == "cuda":
        return _gpu()
    return Machine(
        device=device,
        name=device_name(device),
        cpus=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        threads_per_core=_threads_per_core(),
        isa=_isa_flags(),
        caches=_caches(),
    )


def _gpu() -> Machine:
    import torch

    props = torch.cuda.get_device_properties(0)

    # Older torch builds lack some of these properties: unknown, not a failure.
    def kib(name: str) -> int | None:
        value = getattr(props, name, None)
        return None if value is None else int(value) // 1024

    l2 = getattr(props, "L2_cache_size", None)
    return Machine(
        device="cuda",
        name=props.name,
        capability=f"{props.major}.{props.minor}",
        sms=props.multi_processor_count,
        shared_per_block_kib=kib("shared_memory_per_block"),
        shared_per_block_optin_kib=kib("shared_memory_per_block_optin"),
        shared_per_sm_kib=kib("shared_memory_per_multiprocessor"),
        registers_per_sm=getattr(props, "regs_per_multiprocessor", None),
        threads_per_sm=getattr(props, "max_threads_per_multi_processor", None),
        l2_mib=None if l2 is None else round(l2 / 2**20, 1),
        memory_gib=round(props.total_memory / 2**30, 1),
    )


def _isa_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The ISA_FLAGS the first CPU reports (empty where there is no /proc/cpuinfo)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            found = set(value.split())
            return [flag for flag in ISA_FLAGS if flag in found]
    return []


def _caches(root: Path = CACHE_DIR) -> list[CpuCache]:
    """cpu0's data caches from sysfs, L1 first (empty where sysfs does not say)."""
    caches: list[CpuCache] = []
    for index in sorted(root.glob("index*")):
        try:
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            size = (index / "size").read_text().strip()
            shared = (index / "shared_cpu_list").read_text().strip()
        except OSError:
            continue
        if kind == "Instruction":  # code, not the data a kernel moves
            continue
        suffix = "d" if kind == "Data" else ""
        caches.append(
            CpuCache(name=f"L{level}{suffix}", size_kib=_kib(size), shared_by=_count(shared))
        )
    return caches


def _kib(size: str) -> int:
    """sysfs sizes: '32K', '1024K', '32M'."""
    units = {"K": 1, "M": 1024, "G": 1024 * 1024}
    if size and size[-1] in units:
        return int(size[:-1]) * units[size[-1]]
    return int(size) // 1024


def _count(cpu_list: str) -> int:
    """CPUs in a sysfs list such as '0-3,8-11'."""
    total = 0
    for part in cpu_list.split(","):
        low, _, high = part.partition("-")
        total += int(high or low) - int(low) + 1
    return total
