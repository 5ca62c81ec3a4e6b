"""The capture worker: ``python -m harness.capture.worker JOB_DIR FD``, in the sandbox.

It hooks the requested classes (``harness.capture.hooks``), then runs the repository's tests
(pytest, in this process) and its Markdown examples (``harness.capture.examples``), or the
command the user named (``python script.py ARGS`` or ``python -m module ARGS``, in this
process), then guesses the classes none of that called (``harness.capture.guess``), and sends
what it saw as a ``CaptureReport``. A training
command need not finish: at the job's time limit the worker reports what it has and ends.
"""

from __future__ import annotations

import json
import os
import runpy
import shlex
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from pydantic import BaseModel, Field

from harness.capture.examples import Example
from harness.capture.guess import guess_unseen
from harness.capture.hooks import Recorder
from harness.capture.records import CaptureReport

REPORT_MARGIN_S = 5.0


class CaptureJob(BaseModel):
    root: Path
    classes: list[tuple[str, str]] = Field(description="(path relative to root, class name).")
    tests: list[str] = Field(default_factory=list, description="Test files, relative to root.")
    examples: list[Example] = Field(default_factory=list, description="Markdown examples.")
    command: str | None = None
    guess: bool = Field(
        default=False,
        description="Then build and call each class nothing was seen calling, from guesses "
        "(harness.capture.guess).",
    )
    limit_s: float = Field(description="When to report whatever was seen, and end.")

    def source(self) -> str:
        """What runs, for the report: the command, or the test files and the Markdown files
        of the examples."""
        examples = dict.fromkeys(example.path for example in self.examples)
        return self.command or ", ".join([*self.tests, *examples])


def main(job_dir: Path, channel_fd: int) -> None:
    channel = os.fdopen(channel_fd, "w")  # opened before any of the repository's code runs
    job = CaptureJob.model_validate_json((job_dir / "job.json").read_text())
    (job_dir / "job.json").unlink()
    os.chdir(job.root)
    sys.path.insert(0, str(job.root))
    recorder = Recorder(job.root)
    for path, class_name in job.classes:
        recorder.hook(path, class_name)
    ran = _ran(job)
    source = job.source()
    lock = threading.Lock()

    def report(outcome: str) -> None:
        with lock:
            found = CaptureReport(
                ran=ran,  # type: ignore[arg-type]
                source=source[:500],
                targets=recorder.targets(source[:200], job_dir),
                outcome=outcome[:2000],
            )
            _send(channel, found)
            os._exit(0)

    timer = threading.Timer(max(job.limit_s - REPORT_MARGIN_S, 1.0), report, [_stopped(job)])
    timer.daemon = True
    timer.start()
    if job.command:
        outcome = _guarded("the command", lambda: _run_command(job.command or ""))
    else:
        ended = [_guarded("the tests", lambda: _run_tests(job.tests))] if job.tests else []
        if job.examples:
            ended.append(_run_examples(job.root, job.examples))
        outcome = "; ".join(ended)
    if job.guess:
        guess_unseen(recorder)  # says per class what it raised: never the report's end
    report(outcome)


def _ran(job: CaptureJob) -> str:
    if job.command:
        return "command"
    ran = " and ".join(
        kind for kind, given in (("tests", job.tests), ("examples", job.examples)) if given
    )
    return ran or "guesses"


def _guarded(what: str, run: Callable[[], str]) -> str:
    """How the repository's code ended: its own words, or what it raised."""
    try:
        return run()
    except SystemExit as stop:
        return f"{what} ended with exit status {stop.code}"
    except BaseException as err:  # the repository's code: what it raised is its outcome
        return f"{what} raised {type(err).__name__}: {err}"


def _run_examples(root: Path, examples: list[Example]) -> str:
    """Each Markdown file's blocks in order in one namespace; a block that fails is said and
    the next one runs (it may not need what failed)."""
    namespaces: dict[str, dict] = {}
    failed: list[str] = []
    for example in examples:
        namespace = namespaces.setdefault(example.path, {"__name__": "__main__"})
        where = f"{example.path}:{example.line}"
        try:
            exec(compile(example.runnable(), str(root / example.path), "exec"), namespace)
        except (Exception, SystemExit) as err:  # the example's own failure, said, not ours
            failed.append(f"{where} raised {type(err).__name__}: {str(err)[:200]}")
    ran = f"{len(examples) - len(failed)} of {len(examples)} example blocks ran"
    return ran + (f" ({'; '.join(failed[:3])})" if failed else "")


def _stopped(job: CaptureJob) -> str:
    return f"stopped after {job.limit_s:.0f} s (capture.timeout_s): recorded what had run"


def _run_tests(tests: list[str]) -> str:
    import pytest

    code = pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--continue-on-collection-errors",
            *tests,
        ]
    )
    return f"pytest ended with exit status {int(code)}"


def python_argv(command: str) -> list[str] | None:
    """``python script.py ARGS`` or ``python -m module ARGS`` (``python`` may be left out) as
    the argv after the interpreter; None for any other command. Raises ValueError where the
    quoting cannot be read. The parent checks a command with it before the worker runs it."""
    argv = shlex.split(command)
    if argv and Path(argv[0]).name.startswith("python"):
        argv = argv[1:]
    if argv and (argv[0].endswith(".py") or (argv[0] == "-m" and len(argv) >= 2)):
        return argv
    return None


def _run_command(command: str) -> str:
    argv = python_argv(command)
    if argv is None:
        raise ValueError(f"not a Python command: {command!r}")
    if argv[0] == "-m":
        sys.argv = argv[1:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = argv
        runpy.run_path(argv[0], run_name="__main__")
    return "the command ended"


def _send(channel: TextIO, report: CaptureReport) -> None:
    channel.write(json.dumps({"kind": "report", "body": report.model_dump(mode="json")}) + "\n")
    channel.flush()
    sys.stdout.flush()
    sys.stderr.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
