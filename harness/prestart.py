"""A candidate's timing worker, started while its checks run.

A timing worker's first seconds are the same whatever the checks find: Python and torch
start, CUDA comes up, the reference is built and its parameters checked, and its
``torch.compile`` baseline is compiled (from the problem's compiled baseline after the first
worker). None of that is timed, and neither are the checks, so the two overlap: the worker is
started beside the checks' worker, makes all that ready, and waits (``WorkerJob.await_go``)
for the parent's go, which carries what the checks found that the timing needs. Only then does
it load the candidate and open its first timing window, with the checks' worker gone. A
candidate whose checks fail never reaches its timing worker: it is killed unread.

Two workers hold the device's memory meanwhile: a cuda problem whose reference used more than
a sixth of its GPU's (``fits_beside``) gets its timing worker after its checks, as before.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox import lifetime
from harness.sandbox.bubblewrap import Isolation, WorkerView
from harness.sandbox.channel import ChannelReader
from harness.sandbox.jobs import Go, ReferenceReport
from harness.sandbox.run import WorkerOutcome, finish_worker, start_worker

# A prestarted worker, its reference and compiled baseline, and the checks' worker, its cases
# and outputs, each hold about what the reference run did (several copies of the parameters,
# inputs and outputs): together they should leave the GPU most of its memory.
SHARE_OF_DEVICE = 6


@dataclass
class Launch:
    """A worker ready to start: its job folder (``job.json`` written), its memory limit,
    what its sandbox shows and what its environment adds."""

    job_dir: Path
    memory_limit_gb: float | None
    view: WorkerView
    extra_env: dict[str, str]


@dataclass
class _Started:
    launch: Launch
    process: subprocess.Popen
    reader: ChannelReader
    at: float


def fits_beside(device: str, report: ReferenceReport) -> bool:
    """Whether a timing worker fits on the device beside the checks' worker."""
    if device != "cuda":
        return True
    peak, total = report.peak_device_bytes, report.device_total_bytes
    return peak is not None and total is not None and peak * SHARE_OF_DEVICE <= total


class PrestartedTiming:
    """One candidate's timing worker, started in a thread of its own (making its launch may
    wait for the problem's compiled baseline); ``go`` once the checks passed, ``discard``
    when they did not. Either ends the worker."""

    def __init__(self, launch: Callable[[], Launch], isolation: Isolation) -> None:
        self._isolation = isolation
        self._future: Future[_Started] = Future()
        self._taken = False
        threading.Thread(target=self._start, args=(launch,), daemon=True).start()

    def _start(self, launch: Callable[[], Launch]) -> None:
        try:
            ready = launch()
            at = time.monotonic()
            process, reader = start_worker(
                ready.job_dir, ready.memory_limit_gb, ready.view, self._isolation, ready.extra_env
            )
        except BaseException as err:  # the caller's go raises it (an interrupt, a harness error)
            self._future.set_exception(err)
            return
        self._future.set_result(_Started(ready, process, reader, at))

    @property
    def taken(self) -> bool:
        """Whether its go was given, or it was discarded: it serves no other timing."""
        return self._taken

    def go(
        self,
        go: Go,
        timeout_s: float,
        on_build: Callable[[object], dict],
        deadline: float | None,
    ) -> WorkerOutcome:
        """Let the worker time its candidate, and wait for it as ``run_worker`` does:
        ``timeout_s`` from now (the wait for the checks is not its running)."""
        self._taken = True
        started = self._future.result()
        return finish_worker(
            started.process,
            started.reader,
            started.launch.job_dir,
            timeout_s,
            started.at,
            on_build=on_build,
            deadline=deadline,
            first_line=go.model_dump_json().encode() + b"\n",
        )

    def discard(self) -> None:
        """End the worker unused (now, or once it has started); nothing of it is read."""
        if not self._taken:
            self._taken = True
            self._future.add_done_callback(_end)


def _end(future: Future[_Started]) -> None:
    if future.exception() is not None:  # it never started: nothing to end
        return
    started = future.result()
    with started.reader:
        lifetime.release(started.process)
