"""Timers: CUDA events with a device-wide synchronize before the end event, or perf_counter.

Every timed call gets fresh inputs (so no output can be cached) and, on CUDA, runs after the L2
cache was flushed; statistics are the median and IQR over the repetitions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

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

    def __call__(self, fn: Callable, inputs: list):
        if self.device == "cuda":
            return self._time_cuda(fn, inputs)
        start = time.perf_counter()
        output = fn(*inputs)
        return (time.perf_counter() - start) * 1e3, output

    def _time_cuda(self, fn: Callable, inputs: list):
        assert self.flush_buffer is not None
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
