"""The output folder, checked before any work: a folder kernelpilot can write, held by one run.

A run that could not write its report would lose everything it measured, so ``--out`` is
made and tried when the command line is read. While the run goes on it holds a lock on the
folder (``flock`` on ``.kernelpilot.lock``, released by the OS however the process ends): a
second run into the same folder stops at once instead of overwriting the first one's files.

``kernelpilot review`` runs inside a repository someone is working on: its folder defaults to
one per repository under kernelpilot's cache (``review_folder``), and a ``--out`` inside the
work tree is refused unless git ignores it, so that a review never leaves its reports, kernels
and lock file among the changes the user is about to commit.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

import click

from bot.git import run_git
from harness.builds.cache import default_cache_dir
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


def review_folder(repo: Path) -> Path:
    """``kernelpilot review``'s folder when ``--out`` is not given: one per repository (its name
    and a hash of its path) under kernelpilot's cache, $KERNELPILOT_CACHE or
    ~/.cache/kernelpilot (the build cache's parent), outside any work tree."""
    root = repo.resolve()
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:10]
    return default_cache_dir().parent / "review" / f"{root.name}-{digest}"


def claim_review_option(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path:
    """``review``'s ``--out``: the default folder, or the one given if it is outside the work
    tree of ``--repo`` (an eager option, so it is read first) or ignored by git there; then
    claimed as any output folder."""
    repo = ctx.params.get("repo") or Path(".")
    if value is None:
        return claim(review_folder(repo))
    refuse_inside_work_tree(value, repo)
    return claim(value)


def refuse_inside_work_tree(folder: Path, repo: Path) -> None:
    """An ``OutDirError`` when ``folder`` is in ``repo``'s work tree and git does not ignore
    it. Outside a git repository there is no work tree to keep clean (review says so later)."""
    found = run_git(repo, ["rev-parse", "--show-toplevel"]) if repo.is_dir() else None
    if found is None or found.returncode != 0:
        return
    top = Path(found.stdout.decode().strip()).resolve()
    target = folder.resolve()
    if not target.is_relative_to(top):
        return
    relative = target.relative_to(top).as_posix()
    # A trailing slash: a pattern such as "out/" matches a folder that does not exist yet.
    ignored = relative != "." and run_git(top, ["check-ignore", "-q", "--", f"{relative}/"])
    if ignored and ignored.returncode == 0:
        return
    raise OutDirError(
        f"{folder} is inside the repository's work tree ({top}) and git does not ignore it: "
        "the review's reports, kernels and lock file would show up among your changes. Leave "
        f"--out out (the default is {review_folder(repo)}), name a folder outside the "
        "repository, or add the folder to .gitignore"
    )
