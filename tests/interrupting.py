"""Running the real ``kernelpilot`` command in a process of its own and stopping it with a
real signal at a chosen moment, then finding what it left behind.

A moment is a line of the command's progress output: the signal is sent as soon as that line
is read, while the phase it announces runs (each phase the tests pick lasts seconds: a worker
starting, a build, a timing budget, an LLM call the server holds). Every process of the run
carries a marker in its environment, so whatever it started is found in /proc afterwards,
sandboxed or not.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

MARK = "KP_TEST_RUN_MARK"
LIMIT_S = 900  # one command, however loaded the machine: a stuck run fails the test


@dataclass
class Ran:
    returncode: int
    lines: list[str]  # the progress output, each line without its timestamp
    stderr: str
    stdout: str
    mark: str


def environment(tmp: Path, **extra: str) -> dict[str, str]:
    """The command's environment: no endpoint settings of the caller's, a scratch TMPDIR and
    build cache of the test's own, and a fresh marker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "KERNELPILOT_"))}
    (tmp / "tmp").mkdir(exist_ok=True)
    env |= {
        "PYTHONPATH": str(ROOT),
        "TMPDIR": str(tmp / "tmp"),
        "KERNELPILOT_CACHE": str(tmp / "cache"),
        MARK: uuid.uuid4().hex,
    }
    return env | extra


def run_cli(
    args: list[str],
    cwd: Path,
    env: dict[str, str],
    stop_at: Callable[[int, str], bool] | None = None,
    signals: tuple[int, ...] = (signal.SIGINT,),
) -> Ran:
    """``kernelpilot ARGS``; when ``stop_at(index, line)`` first holds for a progress line,
    each of ``signals`` is sent to the command, in order."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    watchdog = threading.Timer(LIMIT_S, process.kill)
    watchdog.start()
    out: list[str] = []
    reading = threading.Thread(target=lambda: out.append(process.stdout.read()))  # type: ignore[union-attr]
    reading.start()
    lines, raw = [], []
    sent = stop_at is None
    assert process.stderr is not None
    for line in process.stderr:
        raw.append(line)
        progress = re.sub(r"^\[\d\d:\d\d:\d\d\] ", "", line.rstrip("\n"))
        if progress != line.rstrip("\n"):
            lines.append(progress)
            if not sent and stop_at(len(lines) - 1, progress):  # type: ignore[misc]
                for number in signals:
                    process.send_signal(number)
                sent = True
    returncode = process.wait()
    watchdog.cancel()
    reading.join()
    return Ran(returncode, lines, "".join(raw), "".join(out), env[MARK])


def leftovers(mark: str) -> list[str]:
    """The processes still running with the run's marker in their environment."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ.split(b"\0"):
            found.append(f"{entry.name}: {command[:200]}")
    return found


def scratch_left(tmp: Path) -> list[str]:
    """What the run left in its TMPDIR (torch's own compile cache aside)."""
    return sorted(
        path.name for path in (tmp / "tmp").iterdir() if not path.name.startswith("torchinductor")
    )
