"""What the rest of the machine did while a timing window ran: the CPU time every process used
(``/proc/stat``, the whole machine's, sandboxed or not), less the worker's own, over the
window's wall time. The worker's own is every process of its session (it leads one): its
threads, the candidate's, and any process they started, ended or not, so that work a
candidate starts never reads as another process's load. A figure for the report beside the
preempted calls the timer counts: together they say why a window was not judged."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.timings import WindowLoad

_TICKS = os.sysconf("SC_CLK_TCK")


def _machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine since boot: busy counts steal time (another
    virtual machine on the same host), idle and I/O wait are not busy."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is counted inside user time already: leave it out of the total
    total = sum(fields[:8])
    return total - idle, total


def _own_seconds() -> float:
    """CPU seconds of every process in this process's session, with their reaped children's."""
    session, ticks = os.getsid(0), 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile: its time is in its parent's reaped children's
            continue
        # after "pid (comm)": state ppid pgrp session ... utime(12) stime cutime cstime
        if int(fields[3]) == session:
            ticks += sum(int(value) for value in fields[11:15])
    return ticks / _TICKS


class LoadMeter:
    """Started at a window's beginning; ``stop`` gives the window's ``WindowLoad``."""

    def __init__(self) -> None:
        self.wall = time.monotonic()
        self.own = _own_seconds()
        self.busy, self.total = _machine_ticks()

    def stop(self) -> WindowLoad:
        wall = time.monotonic() - self.wall
        busy, total = _machine_ticks()
        own = _own_seconds() - self.own
        busy_s, total_s = (busy - self.busy) / _TICKS, (total - self.total) / _TICKS
        if wall <= 0 or total_s <= 0:  # shorter than a tick: nothing measurable
            return WindowLoad(seconds=wall, cores=float(os.cpu_count() or 1), others_cores=0.0)
        return WindowLoad(
            seconds=wall,
            cores=total_s / wall,
            others_cores=max(0.0, busy_s - own) / wall,
        )
