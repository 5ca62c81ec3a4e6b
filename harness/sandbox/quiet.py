"""Builds pause while a candidate is being timed.

A build (a candidate's build worker, which imports its module, and the compiler's worker of
``harness.builds.requests`` with its ninja and compilers) takes every core it can get; a timing
window on the same cores measures the build, not the kernel. Where builds run beside timing (on
cuda the next candidates build while one is timed), the timing worker says when a window opens
and closes (a ``timing`` message on its channel), and starts timing once told the builds are
stopped; meanwhile every process of every build is stopped (SIGSTOP, the whole process tree,
sandbox included) and continued after. The time a build spends stopped does not count against
its limit (``paused_seconds``). A build the timing worker itself asks for closes the window
first: started stopped, it would never end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _Quiet:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.builds: set[subprocess.Popen] = set()
        self.windows = 0  # timing windows open now
        self.stopped: list[int] = []  # the processes stopped, to continue
        self.since: float | None = None
        self.paused = 0.0  # seconds paused before the current pause


_state = _Quiet()


def paused_seconds() -> float:
    """Seconds builds have been paused so far in this process (the current pause included)."""
    with _state.lock:
        return _state.paused + (time.monotonic() - _state.since if _state.since else 0.0)


@contextmanager
def build(process: subprocess.Popen) -> Iterator[None]:
    """Around a running build worker: paused while any timing window is open."""
    with _state.lock:
        _state.builds.add(process)
        if _state.windows:
            _state.stopped += _stop_tree(process.pid)
    try:
        yield
    finally:
        with _state.lock:
            _state.builds.discard(process)


def window_opened() -> None:
    with _state.lock:
        _state.windows += 1
        if _state.windows == 1:
            _state.since = time.monotonic()
            for process in _state.builds:
                _state.stopped += _stop_tree(process.pid)


def window_closed() -> None:
    with _state.lock:
        if _state.windows == 0:
            return
        _state.windows -= 1
        if _state.windows:
            return
        for pid in reversed(_state.stopped):
            _signal(pid, signal.SIGCONT)
        _state.stopped = []
        if _state.since is not None:
            _state.paused += time.monotonic() - _state.since
        _state.since = None


def _stop_tree(pid: int) -> list[int]:
    """SIGSTOP ``pid`` and then, stopped (so it forks no more), each of its children, down the
    tree: the processes stopped, parents first."""
    if not _signal(pid, signal.SIGSTOP):
        return []
    stopped = [pid]
    for child in _children(pid):
        stopped += _stop_tree(child)
    return stopped


def _children(pid: int) -> list[int]:
    """``pid``'s children, from every process's parent in ``/proc``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):  # ended meanwhile
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def _signal(pid: int, number: int) -> bool:
    try:
        os.kill(pid, number)
        return True
    except (ProcessLookupError, PermissionError):
        return False
