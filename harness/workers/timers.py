"""Timers: CUDA events with a device-wide synchronize before the end event, or perf_counter.

Every timed call gets fresh inputs (so no output can be cached) and, on CUDA, runs after the L2
cache was flushed; statistics are the median and IQR over the repetitions.

Each call also says whether the OS took a core from this process while it ran (an involuntary
context switch of any of its threads: another process's work ran in its place). Such a call's
time measures the machine's load, not the code: it is left out of the statistics and counted
(``TimingStats.preempted``), and a window with many of them is not judged
(``harness.judge.busy``).
"""

from __future__ import annotations

import ctypes
import resource
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

from harness.records import TimingStats


class Timed(NamedTuple):
    """One timed call: its time, its output, and whether the OS preempted the process meanwhile."""

    ms: float
    output: Any
    preempted: bool


def involuntary_switches() -> int:
    """Times the OS has taken a core from any thread of this process for other work so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


class Timer:
    """Times one call of ``fn(*inputs)`` in milliseconds and returns its output too."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.flush_buffer = None
        if device == "cuda":
            l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
            self.flush_buffer = torch.empty(
                max(2 * l2_bytes, 2**24), dtype=torch.uint8, device="cuda"
            )
            self.no_persisting_l2 = persisting_l2_reset()

    def __call__(self, fn: Callable, inputs: list) -> Timed:
        switches = involuntary_switches()
        if self.device == "cuda":
            elapsed, output = self._time_cuda(fn, inputs)
        else:
            start = time.perf_counter()
            output = fn(*inputs)
            elapsed = (time.perf_counter() - start) * 1e3
        return Timed(elapsed, output, involuntary_switches() > switches)

    def _time_cuda(self, fn: Callable, inputs: list) -> tuple[float, Any]:
        assert self.flush_buffer is not None
        self.no_persisting_l2()  # lines kept "persisting" would survive the flush
        self.flush_buffer.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        output = fn(*inputs)
        torch.cuda.synchronize()  # device-wide: work on any stream counts
        end.record()
        end.synchronize()
        return start.elapsed_time(end), output


def summarize(samples_ms: list[float], preempted: list[bool] | None = None) -> TimingStats:
    """Median, IQR and fastest of the timed calls, those the OS preempted (``preempted``, one
    flag per call) left out where any call ran undisturbed."""
    flags = preempted or [False] * len(samples_ms)
    clean = [ms for ms, hit in zip(samples_ms, flags, strict=True) if not hit]
    ordered = sorted(clean or samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return TimingStats(
        median_ms=statistics.median(ordered),
        iqr_ms=quartiles[2] - quartiles[0],
        min_ms=ordered[0],
        samples=len(ordered),
        preempted=sum(flags),
        timed=len(samples_ms),
    )


CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06  # cudaLimitPersistingL2CacheSize


def persisting_l2_reset() -> Callable[[], None]:
    """A function that takes L2's persisting set-aside back to zero and turns every persisting
    line into a normal one (``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0)``,
    ``cudaCtxResetPersistingL2Cache()``), through the CUDA runtime this process loaded.

    Data a kernel marked persisting (an access-policy window on a stream or a launch) stays in
    L2 through a streaming flush: timed that way, the next call finds it there. The symbol
    allow-list keeps candidates from calling these functions; this undoes what got through
    any other way before each timed call.
    """
    runtime = _cuda_runtime()
    set_limit, reset = runtime.cudaDeviceSetLimit, runtime.cudaCtxResetPersistingL2Cache
    set_limit.argtypes, set_limit.restype = [ctypes.c_int, ctypes.c_size_t], ctypes.c_int
    reset.argtypes, reset.restype = [], ctypes.c_int

    def no_persisting_l2() -> None:
        for status in (set_limit(CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, 0), reset()):
            if status != 0:
                raise RuntimeError(f"resetting persisting L2 lines failed: CUDA error {status}")

    return no_persisting_l2


def _cuda_runtime() -> ctypes.CDLL:
    """The CUDA runtime library torch loaded (found in this process's memory map)."""
    torch.cuda.init()
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if "/libcudart.so" in path:
            return ctypes.CDLL(path)
    return ctypes.CDLL(None)  # linked into torch itself: its symbols are in the process
