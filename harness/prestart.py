"""A candidate's timing worker, started while its checks run.

A timing worker's first seconds are the same whatever the checks find: Python and torch
start, CUDA comes up, the reference is built and its parameters checked, and (where that
involves no timing, below) its ``torch.compile`` baseline is made. None of that is timed, and
neither are the checks, so the two overlap: the worker is started beside the checks' worker,
makes all that ready, says so, and waits (``WorkerJob.await_go``) for the parent's go, which
carries what the checks found that the timing needs. Only then does it load the candidate and
open its first timing window, with the checks' worker gone. A candidate whose checks fail
never reaches its timing worker: it is killed unread. A worker that ended before it was ready
is no verdict: the candidate is timed in a fresh one.

The target's torch.compile baseline is compiled before the go only where that involves no
timing: on cpu, and on cuda where the worker loads it from the target's compiled baseline
(``harness.judge.baseline.CompiledBaselines``, compiled once, alone, before these checks
start). A first compile on cuda comes after the go: Inductor picks each kernel's launch
configuration by timing the candidates, and the checks beside it would skew that pick.

Two workers hold the device's memory meanwhile: a cuda problem whose reference used more than
a sixth of its GPU's (``fits_beside``) gets its timing worker after its checks, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.sandbox import lifetime
from harness.sandbox.bubblewrap import Isolation, WorkerView
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


def fits_beside(device: str, report: ReferenceReport) -> bool:
    """Whether a timing worker fits on the device beside the checks' worker."""
    if device != "cuda":
        return True
    peak, total = report.peak_device_bytes, report.device_total_bytes
    return peak is not None and total is not None and peak * SHARE_OF_DEVICE <= total


class PrestartedTiming:
    """One candidate's timing worker, started now; ``go`` once the checks passed, ``discard``
    when they did not. Either ends the worker."""

    def __init__(self, launch: Launch, isolation: Isolation) -> None:
        self.launch = launch
        self.started = time.monotonic()
        self.process, self.reader = start_worker(
            launch.job_dir, launch.memory_limit_gb, launch.view, isolation, launch.extra_env
        )
        self.taken = False  # given its go, or discarded: it serves no other timing

    def go(
        self,
        go: Go,
        timeout_s: float,
        on_build: Callable[[object], dict],
        deadline: float | None,
    ) -> WorkerOutcome | None:
        """Let the worker time its candidate, and wait for it as ``run_worker`` does:
        ``timeout_s`` from now (the wait for the checks is not its running). None where it
        ended before it was ready (its first message): nothing of the candidate's had run in
        it, so that is no verdict, and the caller times the candidate in a fresh worker."""
        self.taken = True
        outcome = finish_worker(
            self.process,
            self.reader,
            self.launch.job_dir,
            timeout_s,
            self.started,
            on_build=on_build,
            deadline=deadline,
            first_line=go.model_dump_json().encode() + b"\n",
        )
        ready = bool(outcome.messages) and outcome.messages[0].kind == "ready"
        return outcome if ready or outcome.deadline_reached else None

    def discard(self) -> None:
        """End the worker unused; nothing of it is read."""
        if not self.taken:
            self.taken = True
            with self.reader:
                lifetime.release(self.process)
