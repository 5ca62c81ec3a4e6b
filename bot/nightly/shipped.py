"""The kernels a repository ships, and whether each still matches its module.

A shipped kernel is a file that a follow-up pull request wrote (and someone merged): its first
line is ``# kernelpilot-verified: <module path>:<Class>`` and its header names the commit it
was verified at (``bot.pr.followup.kernel_module``). It is stale when its class changed since that
commit (the same change detection as a pull request's: the class body, a helper or constant
its ``forward`` uses, a base class), or when its module or class is gone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pydantic import BaseModel, Field

from bot.detect.changes import detect_changes
from bot.git import run_git
from bot.pr.followup import HEADER_TAG
from harness.errors import UserError

HEADER = re.compile(rf"^# {HEADER_TAG}: (?P<module>[^\s:]+\.py):(?P<cls>\w+)\s*$")
VERIFIED_AT = re.compile(r"^# Verified at commit (?P<sha>[0-9a-f]{40})\b")
SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".tox", "build", "dist"}


class ShippedKernel(BaseModel):
    path: str = Field(description="The kernel file, relative to the repository root.")
    module_path: str
    class_name: str
    verified_at: str | None = Field(default=None, description="The commit it was verified at.")

    @property
    def benchmark(self) -> str:
        return f"kernel:{self.path}"


class Staleness(BaseModel):
    stale: bool
    reason: str = ""
    commit: str | None = Field(default=None, description="The commit that changed the module.")


def find_shipped(repo: Path) -> list[ShippedKernel]:
    """Every ``*.py`` under ``repo`` whose first line is kernelpilot's header."""
    found = []
    for path in sorted(repo.rglob("*.py")):
        if SKIPPED_DIRS & set(path.relative_to(repo).parts):
            continue
        with path.open(encoding="utf-8", errors="replace") as lines:
            first = lines.readline()
            header = HEADER.match(first)
            if header is None:
                continue
            verified = None
            for line in (lines.readline() for _ in range(4)):
                match = VERIFIED_AT.match(line)
                if match:
                    verified = match["sha"]
        found.append(
            ShippedKernel(
                path=path.relative_to(repo).as_posix(),
                module_path=header["module"],
                class_name=header["cls"],
                verified_at=verified,
            )
        )
    return found


def staleness(repo: Path, kernel: ShippedKernel, head: str = "HEAD") -> Staleness:
    """Whether ``kernel``'s class changed between its verified commit and ``head``."""
    if not (repo / kernel.module_path).is_file():
        return Staleness(stale=True, reason=f"its module {kernel.module_path} was deleted",
                         commit=last_change(repo, kernel.module_path, kernel.verified_at, head))  # fmt: skip
    if not defines_class(repo / kernel.module_path, kernel.class_name):
        return Staleness(stale=True, reason=f"{kernel.class_name} is no longer in {kernel.module_path}",
                         commit=last_change(repo, kernel.module_path, kernel.verified_at, head))  # fmt: skip
    if kernel.verified_at is None:
        return Staleness(stale=True, reason="its header names no verified commit")
    if run_git(repo, ["cat-file", "-e", f"{kernel.verified_at}^{{commit}}"]).returncode != 0:
        return Staleness(
            stale=True,
            reason=f"its verified commit {kernel.verified_at[:12]} is not in this history "
            "(fetch the full history: actions/checkout with fetch-depth: 0)",
        )
    try:
        changes = detect_changes(repo, kernel.verified_at, head)
    except UserError as err:
        return Staleness(stale=True, reason=err.render())
    for module in changes.modules:
        if (module.path, module.class_name) == (kernel.module_path, kernel.class_name):
            return Staleness(
                stale=True,
                reason=f"{kernel.class_name} changed since {kernel.verified_at[:12]}: {module.reason}",
                commit=last_change(repo, kernel.module_path, kernel.verified_at, head),
            )
    return Staleness(stale=False)


def last_change(repo: Path, path: str, since: str | None, head: str) -> str | None:
    """The last commit in ``since..head`` (all of ``head``'s history without ``since``) that
    touched ``path``, a deletion included."""
    span = f"{since}..{head}" if since else head
    result = run_git(repo, ["log", "-1", "--format=%H", span, "--", path])
    return result.stdout.decode().strip() or None if result.returncode == 0 else None


def defines_class(path: Path, name: str) -> bool | None:
    """Whether the file defines the class at its top level; None when it does not parse."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return None
    return any(isinstance(node, ast.ClassDef) and node.name == name for node in tree.body)
