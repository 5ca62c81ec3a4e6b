"""The output folder, checked before any work: a folder kernelpilot can write, held by one run.

A run that could not write its report would lose everything it measured, so ``--out`` is
made and tried when the command line is read. While the run goes on it holds a lock on the
folder (``flock`` on ``.kernelpilot.lock``, released by the OS however the process ends): a
second run into the same folder stops at once instead of overwriting the first one's files.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import click

from harness.errors import UserError
from harness.files import output_folder

LOCK_NAME = ".kernelpilot.lock"
_held: dict[Path, int] = {}  # folder -> the lock's descriptor, open for the process's life


class OutDirError(click.BadParameter):
    pass


def claim(folder: Path) -> Path:
    """Make ``folder``, check that files can be written in it, and lock it for this process.
    Raises ``OutDirError`` (a ``click.BadParameter``: exit 2, naming the option) otherwise."""
    try:
        output_folder(folder, "--out folder")
    except UserError as err:
        raise OutDirError(f"{err.what}: {err.fix}") from None
    key = folder.resolve()
    if key in _held:
        return folder
    descriptor = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(descriptor, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(descriptor)
        raise OutDirError(
            f"another kernelpilot run (pid {holder}) is writing to {folder}: wait for it to "
            "end or pass another folder"
        ) from None
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
    _held[key] = descriptor
    return folder


def claim_option(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``claim`` as a click callback: the folder is checked while the command line is read."""
    return None if value is None else claim(value)
