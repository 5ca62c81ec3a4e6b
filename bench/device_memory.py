"""Device memory in use, sampled in a thread (nvidia-smi): all processes, and this process
with the ones it started. For the KernelBench sweep (bench/kb_sweep.py) and
bench/bench_reference.py's peak."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path


class MemoryPeak:
    """Device memory (MiB) sampled every 0.2 s in a thread; ``take()`` gives the most seen
    since the last take, as (all processes, this sweep's own). All processes is nvidia-smi's
    memory.used; this sweep's own is the sum of its ``--query-compute-apps`` rows whose pid is
    this process or one it started (None where nvidia-smi names none of them: a container's
    pid namespace). With two sweeps on one device (``--beside``), only the second is this
    sweep's. Does nothing off cuda."""

    def __init__(self, device: str) -> None:
        self.on = device == "cuda" and shutil.which("nvidia-smi") is not None
        gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        self.query = ["nvidia-smi", "-i", gpu, "--format=csv,noheader,nounits"]
        self.peak: tuple[int | None, int | None] = (None, None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> MemoryPeak:
        if self.on:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.on:
            self.thread.join(timeout=5)

    def _smi(self, query: str) -> list[list[str]]:
        try:
            done = subprocess.run([*self.query, query], capture_output=True, text=True, timeout=10)
        except subprocess.TimeoutExpired:
            return []
        if done.returncode != 0:
            return []
        return [[f.strip() for f in line.split(",")] for line in done.stdout.splitlines()]

    def now(self) -> int | None:
        """Device memory in use by every process."""
        if not self.on:
            return None
        rows = self._smi("--query-gpu=memory.used")
        return int(rows[0][0]) if rows and rows[0][0].isdigit() else None

    def own(self) -> int | None:
        """Device memory in use by this process and its descendants, as nvidia-smi names them."""
        ours = own_processes()
        used = [
            int(row[1])
            for row in self._smi("--query-compute-apps=pid,used_memory")
            if len(row) == 2 and row[0].isdigit() and row[1].isdigit() and int(row[0]) in ours
        ]
        return sum(used) if used else None

    def _poll(self) -> None:
        while not self.stop.wait(0.2):
            sample = (self.now(), self.own())
            self.peak = (
                bigger(self.peak[0], sample[0]),
                bigger(self.peak[1], sample[1]),
            )

    def take(self) -> tuple[int | None, int | None]:
        if not self.on:
            return None, None
        time.sleep(0.3)  # one more sample after the step's end
        peak, self.peak = self.peak, (None, None)
        return peak


def bigger(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def own_processes() -> set[int]:
    """This process and every process below it, from /proc's parent links."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(text.split(" ", 1)[0])] = int(fields[1])
    ours = {os.getpid()}
    grew = True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in ours} - ours
        grew = bool(below)
        ours |= below
    return ours
