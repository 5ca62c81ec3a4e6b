"""Compiled bytecode for sandboxed workers where Python keeps it apart from the sources.

With ``PYTHONPYCACHEPREFIX`` set (the way to get bytecode for an install whose own folders hold
none: a read-only system install, an image built without it), Python reads and writes ``.pyc``
files under that prefix. The sandbox shows the prefix read-only: bytecode a worker wrote there
would be code the next candidate's worker runs. So every module that workers import and the
parent never did was compiled from source in every worker: ``torch._dynamo`` alone took 4-5 s
of each of a candidate's two workers on the GPU machine, against 1.5 s from bytecode
(docs/measurement-notes.md). The parent, which runs no untrusted code, compiles the packages
workers import into the prefix before its first sandboxed worker: once per package version (a
marker file), the project's own code every time (``compileall`` skips what is up to date).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import logging
import os
import subprocess
import sys
from pathlib import Path

log = logging.getLogger(__name__)

# What a worker imports (torch, what torch._dynamo and torch.compile import), and kernelpilot's
# own worker code; a package that is not installed is skipped.
PACKAGES = ("torch", "sympy", "mpmath", "networkx", "jinja2", "markupsafe", "triton", "numpy",
            "filelock", "fsspec", "pydantic", "pydantic_core", "typing_extensions")  # fmt: skip
PROJECT = Path(__file__).resolve().parents[1]  # harness/
MARKERS = ".kernelpilot-compiled"

_warmed: set[str] = set()  # prefixes this process has compiled into


def warm(prefix: str | None = None, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """Compile ``packages`` and the harness into the bytecode prefix (``sys.pycache_prefix``),
    once per process and prefix; what was compiled. Nothing where there is no prefix: Python then
    keeps bytecode beside the sources, where a normal install has it."""
    prefix = prefix or sys.pycache_prefix
    if not prefix or prefix in _warmed:
        return []
    _warmed.add(prefix)
    try:
        (Path(prefix) / MARKERS).mkdir(parents=True, exist_ok=True)
    except OSError as err:
        log.warning("no bytecode written under %s (%s): workers compile from source", prefix, err)
        return []
    compiled = []
    for name in packages:
        folder = _package_folder(name)
        if folder is None:
            continue
        place = hashlib.sha256(str(folder).encode()).hexdigest()[:12]  # one install of it
        marker = Path(prefix) / MARKERS / f"{name}-{_version(name)}-{place}"
        if marker.exists():
            continue
        log.warning("compiling %s's bytecode into %s for sandboxed workers (once)", name, prefix)
        _compile(folder, prefix)
        marker.write_text(str(folder) + "\n")
        compiled.append(name)
    _compile(PROJECT, prefix)
    return [*compiled, PROJECT.name]


def _compile(folder: Path, prefix: str) -> None:
    """``folder``'s modules into ``prefix``, by a fresh interpreter (``compileall``'s worker
    processes are forked: not from a parent whose threads may hold locks). Isolated (``-I``: no
    working directory, no user site, no ``PYTHON*`` variables on its path) and run from the
    prefix with no environment but ``PATH``: the parent may be working in a pull request's
    checkout, whose ``compileall.py`` must not be what runs here, beside the parent's secrets.
    Files that do not compile (templates, another Python's syntax) are left as they are."""
    subprocess.run(
        [sys.executable, "-I", "-X", f"pycache_prefix={prefix}", "-m", "compileall", "-q", "-q",
         "-j", "0", str(folder)],
        cwd=prefix, env={"PATH": os.environ.get("PATH", os.defpath)}, check=False,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def _package_folder(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "unversioned"
