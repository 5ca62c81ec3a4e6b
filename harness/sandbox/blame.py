"""Whose fault an exception in a worker is: kernelpilot's own code, or the code it runs (the
candidate's, the module's, the input factory's).

The innermost frame of the traceback decides, libraries (torch, the standard library,
installed packages) passed over: an exception that torch raises inside a candidate's
forward is the candidate's (its frame is the innermost that is not torch's), one that torch
raises inside the harness's own call of it (``torch.iinfo`` on a dtype the harness did not
expect) is kernelpilot's.

A fault on the device (an illegal address, a device-side assert) is the exception: the
device runs asynchronously, so it is reported at whichever later call synchronizes, in
whoever's frame that is. It is never kernelpilot's: the kernels a worker runs are the
candidate's and the module's (and torch's own, for either).
"""

from __future__ import annotations

import site
import sysconfig
import traceback
from collections.abc import Iterable
from functools import cache
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1]
# How torch words an error the device reported (CUDA's messages; on ROCm, HIP's).
DEVICE_ERROR_MARKERS = ("CUDA error", "HIP error", "device-side assert")


def raised_by_kernelpilot(err: BaseException, user_files: Iterable[Path]) -> bool:
    """True when the innermost frame of ``err``'s traceback outside the libraries is
    kernelpilot's (in ``harness/``); ``user_files``: the candidate's and the problem's files,
    theirs wherever they lie (a module installed in site-packages too)."""
    if _device_fault(err):
        return False
    theirs = {_resolved(path) for path in user_files}
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        if frame.filename.startswith("<frozen"):
            continue
        path = _resolved(frame.filename)
        if _within(path, [HARNESS]):
            return True
        if path in theirs or not _within(path, _libraries()):
            return False
    return False


def _device_fault(err: BaseException) -> bool:
    """An error the device reported, asynchronously: whose frame raised it says nothing."""
    return type(err).__name__ == "AcceleratorError" or any(
        marker in str(err) for marker in DEVICE_ERROR_MARKERS
    )


def _resolved(path: str | Path) -> Path:
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):
        return Path(path)


def _within(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == root or root in path.parents for root in roots)


@cache
def _libraries() -> tuple[Path, ...]:
    """Where the standard library and installed packages (torch among them) live."""
    paths = sysconfig.get_paths()
    folders = {paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update([*site.getsitepackages(), site.getusersitepackages()])
    return tuple(_resolved(folder) for folder in folders)
