"""Run a worker in its own sandboxed process (``harness.sandbox.bubblewrap``): no secrets, no network,
no view of other processes or of the machine's files beyond what its job needs, time and memory
limits.

A candidate that segfaults, hangs, poisons its CUDA context, runs out of memory or prints
megabytes costs one failed result; the caller goes on with a fresh process for the next one.

The worker reports on a pipe of its own (newline-delimited JSON messages), never through files
that code in its process could rewrite later; it ends with ``os._exit`` right after its last
message, so no exit handler of a candidate runs after the result is sent.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.sandbox import bytecode, lifetime, quiet, spawner
from harness.sandbox.bubblewrap import Isolation, WorkerView, wrap
from harness.sandbox.channel import Answers, ChannelReader
from harness.sandbox.environment import clean_environment, private_temporary_folder
from harness.sandbox.jobs import WorkerMessage
from harness.sandbox.limits import limits
from harness.sandbox.redact import scrub, scrub_value

WORKER_ENTRY = "harness.sandbox.worker"
LOG_LIMIT = 8000  # characters of a worker's output kept for the report and the debugger


class WorkerOutcome(BaseModel):
    """How a worker process ended; the worker's own report is read by the caller."""

    returncode: int | None
    timed_out: bool
    seconds: float
    log_tail: str
    signal_name: str | None = None
    messages: list[WorkerMessage] = Field(
        default_factory=list, description="What the worker sent on its channel, in order."
    )
    channel_error: str | None = Field(
        default=None, description="Why the channel could not be read (not JSON, too large)."
    )
    deadline_reached: bool = Field(
        default=False,
        description="Stopped at the caller's deadline, before its own limit: not its fault.",
    )

    def results(self) -> list[WorkerMessage]:
        """The final messages ("report", "user_error", or "harness_error" where kernelpilot's
        own code failed in the worker); an honest worker sends one."""
        return [message for message in self.messages if message.final]


def run_worker(
    job_dir: Path,
    timeout_s: float,
    memory_limit_gb: float | None,
    view: WorkerView,
    isolation: Isolation,
    on_outputs: Callable[[object], bool] | None = None,
    extra_env: dict[str, str] | None = None,
    entry: str = WORKER_ENTRY,
    on_build: Callable[[object], dict] | None = None,
    deadline: float | None = None,
    pausable: bool = False,
) -> WorkerOutcome:
    """Run ``python -m ENTRY job_dir FD`` in its sandbox and wait for it: ``timeout_s`` of its
    own running (builds the parent makes for it do not count), and never past ``deadline``
    (``time.monotonic()``; the caller's whole budget, a search's ``--max-time``). A
    ``pausable`` worker (a build) is stopped while a timing window is open
    (``harness.sandbox.quiet``); the time it spends stopped does not count.

    Each time the worker says a case's outputs are ready, ``on_outputs(body)`` (the message's
    body, untrusted) decides whether it goes on ("go" on its stdin) or stops. Each time it asks
    for a build, ``on_build(body)`` answers (a JSON line on its stdin; with no ``on_build``, a
    refusal).
    """
    started = time.monotonic()
    process, reader = start_worker(job_dir, memory_limit_gb, view, isolation, extra_env, entry)
    return finish_worker(
        process, reader, job_dir, timeout_s, started, on_outputs, on_build, deadline, pausable
    )


def finish_worker(
    process: subprocess.Popen,
    reader: ChannelReader,
    job_dir: Path,
    timeout_s: float,
    started: float,
    on_outputs: Callable[[object], bool] | None = None,
    on_build: Callable[[object], dict] | None = None,
    deadline: float | None = None,
    pausable: bool = False,
    first_line: bytes | None = None,
) -> WorkerOutcome:
    """Wait for a worker ``start_worker`` started (at ``started``, ``time.monotonic()``) as
    ``run_worker`` does, ``timeout_s`` counted from now; ``first_line``: written to its stdin
    first (a prestarted worker's go, ``harness.prestart``). It is ended and reaped on every way
    out."""
    answers = Answers(on_outputs, on_build)
    with reader:
        try:
            if first_line is not None:
                _write(process, first_line)
            with quiet.build(process) if pausable else nullcontext():
                stopped = _wait(process, reader, timeout_s, answers, deadline, pausable)
        finally:  # an interrupt, an error in an answer: the worker's group goes too
            answers.close_windows()
            lifetime.release(process)
        reader.drain()
    return _outcome(process, reader, stopped, started, job_dir)


def start_worker(
    job_dir: Path,
    memory_limit_gb: float | None,
    view: WorkerView,
    isolation: Isolation,
    extra_env: dict[str, str] | None = None,
    entry: str = WORKER_ENTRY,
) -> tuple[subprocess.Popen, ChannelReader]:
    """Start ``python -m ENTRY job_dir FD``: in a bubblewrap sandbox that sees ``view`` and its
    job folder (``harness.sandbox.bubblewrap``), or with ``isolation`` off only in a network namespace
    where the OS allows one. Its log goes to ``job_dir/worker.log``, its messages come on the
    reader, its stdin is a pipe of ours. ``extra_env``: the harness's own additions to the
    cleaned environment (the stream gate's preload, whose library the sandbox shows)."""
    env = clean_environment() | (extra_env or {})
    read_end, write_end = os.pipe()
    argv = [sys.executable, "-m", entry, str(job_dir), str(write_end)]
    if isolation == "off":
        env |= private_temporary_folder(job_dir)
    if isolation == "bubblewrap":
        bytecode.warm()  # the read-only bytecode prefix the sandbox shows, filled once
        preloads = [Path(p) for p in env.get("LD_PRELOAD", "").split() if p]
        for folder in view.writable:  # a folder bound in must exist
            folder.mkdir(parents=True, exist_ok=True)
        view = view.model_copy(
            update={"writable": [*view.writable, job_dir], "read_only": view.read_only + preloads}
        )
        argv = wrap(argv, view, env | {"HOME": "/tmp", "TMPDIR": "/tmp"}, job_dir)
    with (job_dir / "worker.log").open("wb") as log:
        try:
            # started and registered by the spawner thread: a worker started from a thread
            # of its caller's would die with that thread (harness.sandbox.spawner)
            process = spawner.popen(
                args=argv,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=job_dir,
                start_new_session=True,
                pass_fds=(write_end,),
                preexec_fn=limits(memory_limit_gb, isolate_network=isolation == "off"),
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the worker holds the only write end: EOF when it is gone
    return process, ChannelReader(os.fdopen(read_end, "rb", buffering=0))


def stop_worker(
    process: subprocess.Popen, reader: ChannelReader, started: float, job_dir: Path
) -> WorkerOutcome:
    """End a worker started with ``start_worker`` (killed if still running) and say how."""
    with reader:
        lifetime.release(process)
        reader.drain()
    return _outcome(process, reader, None, started, job_dir)


def _outcome(
    process: subprocess.Popen,
    reader: ChannelReader,
    stopped: Literal["timeout", "deadline"] | None,
    started: float,
    job_dir: Path,
) -> WorkerOutcome:
    returncode = process.returncode
    signal_name = None
    if returncode is not None and returncode < 0:
        signal_name = signal.Signals(-returncode).name
    elif returncode is not None and 128 < returncode <= 128 + 64:
        # bubblewrap exits with 128 + the signal that ended the command inside it
        try:
            signal_name = signal.Signals(returncode - 128).name
        except ValueError:
            pass
    return WorkerOutcome(
        returncode=returncode,
        timed_out=stopped == "timeout",
        deadline_reached=stopped == "deadline",
        seconds=time.monotonic() - started,
        # What a worker says is scrubbed of secrets' shapes and values before anyone reads it:
        # its text reaches prompts, reports and comments (harness.sandbox.redact).
        log_tail=scrub(read_tail(job_dir / "worker.log")),
        signal_name=signal_name,
        messages=[
            WorkerMessage(kind=message.kind, body=scrub_value(message.body))
            for message in reader.messages
        ],
        channel_error=reader.error,
    )


def _wait(
    process: subprocess.Popen,
    reader: ChannelReader,
    timeout_s: float,
    answer: Answers,
    deadline: float | None,
    pausable: bool = False,
) -> Literal["timeout", "deadline"] | None:
    """Wait for the worker, answering each of its questions in turn. It may run ``timeout_s``
    of its own: the time the parent spends building for it does not count (a build has its own
    limit, and a cached one takes none), nor, for a ``pausable`` one, the time it was paused.
    Why it was stopped, or None when it ended itself: "timeout", or "deadline" when the
    caller's ``deadline`` (``time.monotonic()``) came first."""
    answered = 0
    ends = time.monotonic() + timeout_s
    paused_before = quiet.paused_seconds()
    while process.poll() is None:
        lifetime.check()  # a stop signal whose exception was lost elsewhere
        now = time.monotonic()
        if pausable:
            now -= quiet.paused_seconds() - paused_before
        if deadline is not None and time.monotonic() > deadline and deadline < ends:
            return "deadline"
        if now > ends:
            return "timeout"
        reader.poll(0.02)
        for message in reader.messages[answered:]:
            answered += 1
            asked = time.monotonic()
            reply = answer(message)
            if message.kind == "build":
                ends += time.monotonic() - asked
            if reply is not None:
                _write(process, reply)
    return None


def _write(process: subprocess.Popen, line: bytes) -> None:
    """A line to the worker's stdin; a worker that is gone reads nothing (its end is seen by
    the caller's wait)."""
    assert process.stdin is not None
    try:
        process.stdin.write(line)
        process.stdin.flush()
    except BrokenPipeError:
        pass


def read_tail(path: Path, limit: int = LOG_LIMIT) -> str:
    """The end of a log, however large the file grew."""
    if not path.exists():
        return ""
    size = path.stat().st_size
    with path.open("rb") as handle:
        if size > limit:
            handle.seek(size - limit)
        text = handle.read().decode("utf-8", errors="replace")
    return (f"[... {size - limit} bytes cut ...]\n" + text) if size > limit else text
