"""Timers: CUDA events with a device-wide synchronize before the end event, or perf_counter.

Every timed call gets fresh inputs (so no output can be cached) and, on CUDA, runs after the L2
cache was flushed; statistics are the median and IQR over the repetitions.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from harness.records import TimingStats


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

    def __call__(self, fn: Callable, inputs: list):
        if self.device == "cuda":
            return self._time_cuda(fn, inputs)
        start = time.perf_counter()
        output = fn(*inputs)
        return (time.perf_counter() - start) * 1e3, output

    def _time_cuda(self, fn: Callable, inputs: list):
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


def summarize(samples_ms: list[float]) -> TimingStats:
    ordered = sorted(samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return TimingStats(
        median_ms=statistics.median(ordered),
        iqr_ms=quartiles[2] - quartiles[0],
        min_ms=ordered[0],
        samples=len(ordered),
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
