"""Timers: CUDA events with a device-wide synchronize before the end event, or perf_counter.

Every timed call gets fresh inputs (so no output can be cached) and, on CUDA, runs after the L2
cache was flushed; statistics are the median and IQR over the repetitions.

Each call also says whether it was preempted: whether the OS kept any thread of this process
waiting for a core, while it ran, for over ``DELAY_SHARE`` of the call's time (the threads'
``run_delay`` in ``/proc/self/task/*/schedstat``; where the kernel keeps none, any involuntary
context switch counts). Such a call's time measures the machine's load, not the code: it is
left out of the statistics and counted (``TimingStats.preempted``), and a window with many of
them is not judged where other processes were busy (``harness.judge.busy``).
"""

from __future__ import annotations

import ctypes
import os
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


# A call counts as preempted when its threads waited this share of its time for a core: a
# wake-up of another process costs microseconds, a CPU-bound one's time slice milliseconds.
DELAY_SHARE = 0.05


class WaitClock:
    """Nanoseconds each thread of this process has waited for a core (its ``run_delay``), read
    through descriptors kept open per thread: about 10 us a reading on 3 threads."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.available = Path("/proc/thread-self/schedstat").exists()

    def __call__(self) -> dict[str, int]:
        if not self.available:  # no scheduler statistics: count involuntary switches instead
            return {"switches": resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw}
        waits = {}
        threads = set(os.listdir("/proc/self/task"))
        for gone in self.files.keys() - threads:
            os.close(self.files.pop(gone))
        for tid in threads:
            count = self._read(tid)
            if count is None and tid in self.files:  # a descriptor of an ended thread whose id
                os.close(self.files.pop(tid))  # came back: open the new thread's
                count = self._read(tid)
            if count is not None:
                waits[tid] = count
        return waits

    def _read(self, tid: str) -> int | None:
        try:
            if tid not in self.files:
                self.files[tid] = os.open(f"/proc/self/task/{tid}/schedstat", os.O_RDONLY)
            return int(os.pread(self.files[tid], 128, 0).split()[1])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            return None

    def preempted(self, before: dict[str, int], after: dict[str, int], elapsed_ms: float) -> bool:
        """Whether a call of ``elapsed_ms`` between the readings ``before`` and ``after`` was
        preempted: thread by thread (one that ended took its count with it; one that started
        waited all its count during the call)."""
        waited = sum(count - before.get(tid, 0) for tid, count in after.items())
        if not self.available:
            return waited > 0
        return waited / 1e6 > DELAY_SHARE * elapsed_ms

    def close(self) -> None:
        for descriptor in self.files.values():
            os.close(descriptor)
        self.files.clear()

    def __del__(self) -> None:
        self.close()


class Timer:
    """Times one call of ``fn(*inputs)`` in milliseconds and returns its output too."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.waits = WaitClock()
        self.flush_buffer = None
        if device == "cuda":
            l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
            self.flush_buffer = torch.empty(
                max(2 * l2_bytes, 2**24), dtype=torch.uint8, device="cuda"
            )
            self.no_persisting_l2 = persisting_l2_reset()

    def __call__(self, fn: Callable, inputs: list) -> Timed:
        waited = self.waits()
        if self.device == "cuda":
            elapsed, output = self._time_cuda(fn, inputs)
        else:
            start = time.perf_counter()
            output = fn(*inputs)
            elapsed = (time.perf_counter() - start) * 1e3
        return Timed(elapsed, output, self.waits.preempted(waited, self.waits(), elapsed))

    def close(self) -> None:
        self.waits.close()

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
    """Median, IQR and fastest of the timed calls; where the OS preempted some (``preempted``,
    one flag per call) and not all, the same of the others beside them (``undisturbed``). Which
    ones count is the judge's to say (``harness.judge.busy.judged_timings``): a worker running
    candidate code does not choose which of its calls are left out."""
    flags = preempted or [False] * len(samples_ms)
    clean = [ms for ms, hit in zip(samples_ms, flags, strict=True) if not hit]
    stats = _stats(samples_ms)
    stats.preempted = sum(flags)
    if 0 < len(clean) < len(samples_ms):
        stats.undisturbed = _stats(clean)
    return stats


def _stats(samples_ms: list[float]) -> TimingStats:
    ordered = sorted(samples_ms)
    quartiles = statistics.quantiles(ordered, n=4) if len(ordered) >= 2 else [ordered[0]] * 3
    return TimingStats(
        median_ms=statistics.median(ordered),
        iqr_ms=quartiles[2] - quartiles[0],
        min_ms=ordered[0],
        samples=len(ordered),
        timed=len(ordered),
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
