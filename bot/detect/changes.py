"""From a base and a head commit, the changed ``nn.Module`` classes and how to run each.

The diff is ``git diff base...head``: from the merge base to head, what GitHub's "Files changed"
tab shows. So base need not be an ancestor of head (the base branch may have moved on since the
PR branched), and changes made on the base branch meanwhile are not the PR's. Every file is read
from the head commit's objects (``git cat-file``), never from the work tree, so detection sees
exactly the commit it names whatever is checked out. Refs and paths are untrusted: git runs with
list arguments, refs are passed after ``--end-of-options``, and blobs are addressed by SHA.

Bad input in the PR is reported per file (a syntax error, a binary or huge file, a deleted
file) and the other files go on; bad input from whoever calls this (an unknown ref, histories
with no common commit, a broken ``[tool.kernelpilot]``) is a ``UserError``. The AST side is
``bot.detect.modules``; the head commit's files and configuration, ``bot.detect.head``.
"""

from __future__ import annotations

import ast
import posixpath
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from bot.detect.head import HeadFiles, HeadProject, SkippedFile, project_for
from bot.detect.modules import (
    ClassChange,
    ModuleIndex,
    changed_classes,
    init_signature,
    kernelbench_class,
)
from bot.git import (
    REGULAR_MODES,
    DiffEntry,
    changed_lines,
    check_repository,
    diff_entries,
    find_merge_base,
    resolve,
)
from harness.errors import UserError
from harness.problem.load import defines_function, target_toml

KERNELBENCH_INPUTS = {"get_inputs", "get_init_inputs"}


class ChangedFile(BaseModel):
    """A ``.py`` file the PR changed."""

    path: str = Field(
        description="Path in head, relative to the repository root (deleted: in base)."
    )
    old_path: str | None = Field(default=None, description="The path in base, for a renamed file.")
    status: Literal["added", "modified", "renamed", "deleted"]


class ChangedModule(BaseModel):
    """An nn.Module class the PR changed, and how kernelpilot would build its inputs."""

    path: str = Field(description="File in head, relative to the repository root.")
    class_name: str
    class_line: int = Field(description="Line of the ``class`` statement in head (for a review).")
    lines: list[int] = Field(description="The changed head lines that make it changed.")
    reason: str = Field(
        description="'class added', 'class body changed', 'helper X changed' (a top-level "
        "function, class or constant of the file it uses) or 'base class X changed'."
    )
    target: str | None = Field(
        default=None, description="'path.py:Class' for the runner, relative to the repository root."
    )
    target_source: Literal["config", "get_inputs"] | None = Field(
        default=None, description="A [[tool.kernelpilot.targets]] entry, or get_inputs() beside it."
    )
    missing_config: str | None = Field(
        default=None, description="No target: the TOML lines to add to config_path."
    )
    config_path: str | None = Field(
        default=None, description="The pyproject.toml that missing_config goes into."
    )


class ChangeReport(BaseModel):
    """What a PR changed, for the runner (``targets()``) and the comment (everything)."""

    base: str = Field(description="The base ref as given.")
    head: str = Field(description="The head ref as given.")
    base_sha: str
    head_sha: str
    merge_base: str = Field(description="The commit the diff starts from.")
    max_targets: int = Field(description="The cap on targets per run.")
    files: list[ChangedFile] = Field(default_factory=list)
    modules: list[ChangedModule] = Field(
        default_factory=list, description="Changed modules to optimize, and those lacking inputs."
    )
    skipped_files: list[SkippedFile] = Field(default_factory=list)
    over_cap: list[ChangedModule] = Field(
        default_factory=list, description="Not optimized: over the cap of max_targets."
    )

    def targets(self) -> list[ChangedModule]:
        """The modules to optimize this run."""
        return [module for module in self.modules if module.target is not None]

    def unconfigured(self) -> list[ChangedModule]:
        """Changed modules with no way to build inputs (the comment shows their TOML)."""
        return [module for module in self.modules if module.target is None]


def detect_changes(repo: Path, base: str, head: str, max_targets: int = 20) -> ChangeReport:
    """The changed modules between ``base`` and ``head`` of the git repository at ``repo``."""
    if max_targets < 0:
        raise UserError(
            f"max_targets is {max_targets}", where="detect_changes", fix="give 0 or more targets"
        )
    repo = repo.resolve()
    check_repository(repo)
    base_sha, head_sha = resolve(repo, base, "base"), resolve(repo, head, "head")
    merge_base = find_merge_base(repo, base_sha, head_sha, base, head)
    entries = [entry for entry in diff_entries(repo, merge_base, head_sha) if entry.is_python()]
    files = HeadFiles(repo, head_sha, [entry.new_blob for entry in entries if entry.readable()])
    index = ModuleIndex(files)
    found: list[ChangedModule] = []
    skipped: list[SkippedFile] = []
    for entry in entries:
        outcome = _examine(repo, entry, files, index)
        if isinstance(outcome, SkippedFile):
            skipped.append(outcome)
        else:
            found.extend(outcome)
    modules, over_cap = _apply_cap(found, max_targets)
    return ChangeReport(
        base=base,
        head=head,
        base_sha=base_sha,
        head_sha=head_sha,
        merge_base=merge_base,
        max_targets=max_targets,
        files=[_file_record(entry) for entry in entries],
        modules=modules,
        skipped_files=skipped,
        over_cap=over_cap,
    )


def _apply_cap(
    found: list[ChangedModule], max_targets: int
) -> tuple[list[ChangedModule], list[ChangedModule]]:
    """The first ``max_targets`` modules with a target run; the rest are listed as over the cap.
    Modules without a target cost no run, so they never take a place under the cap."""
    kept: list[ChangedModule] = []
    over: list[ChangedModule] = []
    runnable = 0
    for module in found:
        if module.target is not None and runnable >= max_targets:
            over.append(module)
            continue
        runnable += module.target is not None
        kept.append(module)
    return kept, over


# --- one file ----------------------------------------------------------------------------------


def _examine(
    repo: Path, entry: DiffEntry, files: HeadFiles, index: ModuleIndex
) -> list[ChangedModule] | SkippedFile:
    """The changed modules of one file, or why it was skipped."""
    if entry.status == "D" or not entry.path.endswith(".py"):
        renamed = f"renamed to {entry.path}, not a Python file; " if entry.status != "D" else ""
        reason = f"{renamed}deleted: its modules are gone, nothing to optimize"
        return SkippedFile(path=entry.old_path or entry.path, kind="deleted", reason=reason)
    if entry.new_mode not in REGULAR_MODES:
        return SkippedFile(path=entry.path, kind="not_a_file", reason="not a regular file (a link)")
    loaded = files.load(entry.path)
    if isinstance(loaded, SkippedFile):
        return loaded
    tree, text = loaded
    if entry.status == "A":
        changed = set(range(1, len(text.splitlines()) + 1))
    else:
        changed = changed_lines(repo, entry.old_blob, entry.new_blob)
    project = project_for(files, entry.path)
    configured = {cls for path, cls in project.targets if path == entry.path}
    classes = index.module_classes(entry.path, tree, also=configured)
    inputs_class = kernelbench_class(classes) if defines_function(tree, "get_inputs") else None
    extra_uses = {inputs_class: KERNELBENCH_INPUTS} if inputs_class else {}
    by_name = {node.name: node for node in classes}
    return [
        _module_record(entry.path, change, by_name[change.class_name], project, inputs_class)
        for change in changed_classes(tree, classes, changed, extra_uses)
    ]


def _module_record(
    path: str,
    change: ClassChange,
    node: ast.ClassDef,
    project: HeadProject,
    inputs_class: str | None,
) -> ChangedModule:
    record = ChangedModule(
        path=path,
        class_name=change.class_name,
        class_line=change.class_line,
        lines=change.lines,
        reason=change.reason,
    )
    if (path, change.class_name) in project.targets:
        return record.model_copy(
            update={"target": f"{path}:{change.class_name}", "target_source": "config"}
        )
    if change.class_name == inputs_class:
        return record.model_copy(
            update={"target": f"{path}:{change.class_name}", "target_source": "get_inputs"}
        )
    relative = posixpath.relpath(path, project.folder or ".")
    toml = target_toml(relative, change.class_name, init_signature(node) or "constructor arguments")
    return record.model_copy(update={"missing_config": toml, "config_path": project.pyproject})


def _file_record(entry: DiffEntry) -> ChangedFile:
    status = {"A": "added", "D": "deleted", "R": "renamed"}.get(entry.status, "modified")
    return ChangedFile(path=entry.path, old_path=entry.old_path, status=status)  # type: ignore[arg-type]
