"""How kernelpilot's processes and scratch folders end: one way, on every exit path.

Every worker kernelpilot starts runs in a process group of its own (``harness.sandbox.run``); each
is registered here while it lives, and every scratch folder of the run is made under one root
folder (``scratch``). Whatever ends the run (its normal end, an error, Ctrl-C, SIGTERM, SIGHUP),
``stopping_cleanly`` kills every registered group and removes the root before the command
returns, with later signals held off meanwhile: nothing is left running or on disk.

A signal is turned into ``Interrupted`` (a ``KeyboardInterrupt``) in the main thread, once; the
registered groups are killed at that moment, so threads waiting on workers (parallel builds) see
them end at once, and no new worker starts after it (``register`` refuses).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# The signals that end a run: Ctrl-C, a runner cancelling its job, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
SCRATCH_PREFIX = "kernelpilot-run-"


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal: what was done is kept, nothing goes on."""

    def __init__(self, signal_number: int = signal.SIGINT) -> None:
        self.signal_number = signal_number
        super().__init__(signal.Signals(signal_number).name)

    @property
    def exit_code(self) -> int:
        return 128 + self.signal_number


class OutOfTime(Exception):
    """The caller's deadline came while a worker ran: its result is unknown, not a failure."""


class _Lifetime:
    """The run's live worker groups and its scratch root (one per process)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen] = set()
        self.stopping: int | None = None  # the signal that stopped the run
        self.root: Path | None = None

    def scratch_root(self) -> Path:
        with self.lock:
            if self.root is None or not self.root.is_dir():
                self.root = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
            return self.root


_run = _Lifetime()


def scratch(prefix: str) -> Path:
    """A new scratch folder of this run (removed when the run ends, whatever ends it)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_run.scratch_root()))


def register(process: subprocess.Popen) -> None:
    """Track a started worker (the leader of its own process group) until ``release``. A run
    that is stopping starts nothing: the worker is killed at once and ``Interrupted`` raised."""
    with _run.lock:
        stopping = _run.stopping
        if stopping is None:
            _run.processes.add(process)
            return
    kill_group(process)
    raise Interrupted(stopping)


def check() -> None:
    """Raise ``Interrupted`` when the run is stopping: where a signal's exception was lost (a
    finalizer, a callback), the next check raises it."""
    if _run.stopping is not None:
        raise Interrupted(_run.stopping)


def release(process: subprocess.Popen) -> None:
    """Kill ``process``'s whole group (if anything of it still runs), reap it, stop tracking."""
    kill_group(process)
    with _run.lock:
        _run.processes.discard(process)


def kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the group ``process`` leads and reap the leader."""
    _sigkill_group(process)
    process.wait()


def kill_all() -> None:
    """Kill every registered worker's group (safe from a signal handler: no waiting)."""
    for process in list(_run.processes):
        _sigkill_group(process)


def _sigkill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already
        pass


def live_workers() -> int:
    """How many workers are registered and not yet released (tests)."""
    with _run.lock:
        return len(_run.processes)


def end_run(outer: set[subprocess.Popen] | None = None, outer_root: Path | None = None) -> None:
    """Kill and reap every registered worker but ``outer``'s, remove the scratch root, and
    make ``outer_root`` the scratch root again (what was there before the run, if anything)."""
    for process in list(_run.processes - (outer or set())):
        release(process)
    root, _run.root = _run.root, outer_root
    if root is not None and root != outer_root:
        shutil.rmtree(root, ignore_errors=True)


def _on_signal(number: int, frame: object) -> None:
    if _run.stopping is not None:  # already stopping: cleaning up, a second Ctrl-C waits
        return
    _run.stopping = number
    kill_all()
    # Workers are started by the spawner thread (harness.sandbox.spawner), never in this one:
    # no fork here, whose at-fork hooks would lose the exception.
    raise Interrupted(number)


def _unraisable(hook):
    """``sys.unraisablehook`` for the run: an ``Interrupted`` lost in a context that cannot
    raise is not printed (``check`` and ``register`` raise it again); anything else is."""

    def handle(unraisable) -> None:
        if not isinstance(unraisable.exc_value, Interrupted):
            hook(unraisable)

    return handle


@contextmanager
def stopping_cleanly() -> Iterator[None]:
    """Run the body as the process's run: stop signals become ``Interrupted``, and on every
    way out the workers are killed and the scratch root removed, signals held off meanwhile.

    Only the main thread can install signal handlers; elsewhere (a thread of a test) the body
    runs with the cleanup alone."""
    # Python's first tempfile call writes a probe file into TMPDIR and removes it: made now, so
    # that no stop signal can land in between and leave it there.
    tempfile.gettempdir()
    # The run's own workers and scratch root: what was there before (an evaluator made
    # outside any run, in a test) is not the run's to end. Its root is made now, before stop
    # signals are taken: made later, a signal landing between the folder's creation and its
    # being recorded as the root left it behind.
    with _run.lock:
        outer, outer_root = set(_run.processes), _run.root
        _run.root = Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-"))
    main = threading.current_thread() is threading.main_thread()
    previous = {number: signal.getsignal(number) for number in STOP_SIGNALS} if main else {}
    for number in previous:
        signal.signal(number, _on_signal)
    unraisable, sys.unraisablehook = sys.unraisablehook, _unraisable(sys.unraisablehook)
    try:
        yield
    except Exception as err:
        # A stop signal's Interrupted raised inside a library that wraps what it catches
        # (pydantic's serializer, mid-model_dump_json) comes out as that library's error: the
        # run was stopping, so it is the stop, not a failure of kernelpilot's.
        if _run.stopping is not None:
            raise Interrupted(_run.stopping) from err
        raise
    finally:
        if main:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            end_run(outer if _run.stopping is None else set(), outer_root)
        finally:
            stopped, _run.stopping = _run.stopping, None
            sys.unraisablehook = unraisable
            if main:
                if stopped is not None:  # a second Ctrl-C held off meanwhile is dropped
                    for number in previous:
                        signal.signal(number, signal.SIG_IGN)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
            for number, handler in previous.items():
                signal.signal(number, handler)
