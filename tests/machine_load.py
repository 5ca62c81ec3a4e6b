"""A machine under load: one CPU-bound process per core, at the same priority as everything
else, for as long as a ``with`` block lasts (the corpus tests' fixture and ``python -m bench
busy``). What a self-hosted runner's other jobs, or the next candidate's build, do to a run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Pure Python arithmetic: a core's worth of work, no memory traffic to speak of, no output.
SPIN = "x = 0\nwhile True:\n    x = (x * 1103515245 + 12345) % 2147483648\n"


@contextmanager
def cpu_load(processes: int | None = None) -> Iterator[list[subprocess.Popen]]:
    """Start ``processes`` (default: one per core) CPU-bound processes; stop them after."""
    count = processes if processes is not None else os.cpu_count() or 1
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True) for _ in range(count)
    ]
    try:
        yield spinners
    finally:
        for spinner in spinners:
            try:
                os.killpg(spinner.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            spinner.wait()
