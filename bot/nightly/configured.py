"""The targets a repository configures (``[[tool.kernelpilot.targets]]`` in the pyproject.toml
at or above its root), as the nightly job benchmarks them, and whether each is still there.

A target is named by its path from the repository root and its class, as a shipped kernel's
header names its module: the two are matched that way, so a target that ships a kernel is
benchmarked once, through its kernel.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from bot.nightly.shipped import defines_class, last_change
from bot.settings import Settings
from harness.errors import UserError


class ConfiguredTarget(BaseModel):
    module_path: str = Field(description="The module's file, relative to the repository root.")
    class_name: str
    entry: str = Field(description="The entry's module value as written: 'path.py:Class'.")
    pyproject: str = Field(description="The pyproject.toml that configures it (repository path).")

    @property
    def benchmark(self) -> str:
        return f"target:{self.module_path}:{self.class_name}"

    @property
    def where(self) -> str:
        return f"{self.pyproject}: tool.kernelpilot.targets module = {self.entry!r}"


def configured_targets(repo: Path, settings: Settings) -> list[ConfiguredTarget]:
    """Every target the project ``repo`` belongs to configures (``settings``, read from
    ``repo``; none without a project)."""
    pyproject = settings.pyproject
    if pyproject is None:
        return []
    targets = []
    for entry in settings.targets:
        path_text, _, class_name = entry.module.partition(":")
        module = Path(os.path.normpath(pyproject.parent / path_text))
        targets.append(
            ConfiguredTarget(
                module_path=Path(os.path.relpath(module, repo)).as_posix(),
                class_name=class_name,
                entry=entry.module,
                pyproject=Path(os.path.relpath(pyproject, repo)).as_posix(),
            )
        )
    return targets


def missing(repo: Path, target: ConfiguredTarget) -> UserError | None:
    """Why a configured target is gone (its file, or its class in it), with the commit that
    last changed its file; None while it is there."""
    path = repo / target.module_path
    if path.is_file() and defines_class(path, target.class_name) is not False:
        return None  # there (a file that does not parse: loading it says why)
    changed = last_change(repo, target.module_path, None, "HEAD")
    if not path.is_file():
        what = f"the configured target's file {target.module_path} does not exist"
        what += f" (deleted by commit {changed[:12]})" if changed else " (never committed)"
    else:
        what = f"{target.class_name} is no longer defined in {target.module_path}"
        what += f" (the file last changed in commit {changed[:12]})" if changed else ""
    return UserError(
        what,
        where=target.where,
        fix=f"restore {target.class_name}, point the entry at where it is now, or remove the "
        f"[[tool.kernelpilot.targets]] entry from {target.pyproject}",
    )
