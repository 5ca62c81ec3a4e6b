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
``bot.modules``.
"""

from __future__ import annotations

import ast
import os
import posixpath
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from bot.modules import (
    ClassChange,
    ModuleIndex,
    changed_classes,
    init_signature,
    kernelbench_class,
)
from harness.config import ProjectConfig
from harness.errors import UserError
from harness.problem import defines_function, target_toml

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

MAX_FILE_BYTES = 1_000_000  # a .py file larger than this is generated, not a hand-written module
KERNELBENCH_INPUTS = {"get_inputs", "get_init_inputs"}
REGULAR_MODES = ("100644", "100755")  # not a link (120000) or a submodule (160000)
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


class ChangedFile(BaseModel):
    """A ``.py`` file the PR changed."""

    path: str = Field(
        description="Path in head, relative to the repository root (deleted: in base)."
    )
    old_path: str | None = Field(default=None, description="The path in base, for a renamed file.")
    status: Literal["added", "modified", "renamed", "deleted"]


class SkippedFile(BaseModel):
    """A changed ``.py`` file whose modules could not be looked at, and why."""

    path: str
    kind: Literal["deleted", "syntax_error", "binary", "too_large", "not_a_file"]
    reason: str = Field(description="One sentence for the PR comment.")


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
    _check_repository(repo)
    base_sha, head_sha = _resolve(repo, base, "base"), _resolve(repo, head, "head")
    merge_base = _merge_base(repo, base_sha, head_sha, base, head)
    entries = [entry for entry in _diff(repo, merge_base, head_sha) if entry.is_python()]
    files = _HeadFiles(repo, head_sha, [entry.new_blob for entry in entries if entry.readable()])
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
        files=[entry.record() for entry in entries],
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
    repo: Path, entry: _DiffEntry, files: _HeadFiles, index: ModuleIndex
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
        changed = _changed_lines(repo, entry.old_blob, entry.new_blob)
    project = _project_for(files, entry.path)
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
    path: str, change: ClassChange, node: ast.ClassDef, project: _Project, inputs_class: str | None
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


def _changed_lines(repo: Path, old_blob: str, new_blob: str) -> set[int]:
    """Head line numbers the diff adds or replaces. A pure deletion counts as a change on the
    head line just above it (line 1 at the top), so removing a statement changes its block."""
    diff = _git(
        repo, ["diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", old_blob, new_blob]
    )
    changed: set[int] = set()
    for line in diff.splitlines():
        match = _HUNK.match(line)
        if match:
            start, count = int(match[1]), int(match[2] if match[2] is not None else 1)
            changed.update(range(start, start + count) if count else [max(start, 1)])
    return changed


# --- the configuration in head -----------------------------------------------------------------


@dataclass(frozen=True)
class _Project:
    """The pyproject.toml that governs a file: its configured targets (repository paths)."""

    pyproject: str
    folder: str
    targets: frozenset[tuple[str, str]]


def _project_for(files: _HeadFiles, path: str) -> _Project:
    """The nearest pyproject.toml at or above the file with a [tool.kernelpilot] table (as
    ``harness.config.find_pyproject`` does on disk); without one, the nearest pyproject.toml,
    or the repository root's, is where the missing lines go."""
    folders = [str(parent).removeprefix(".") for parent in PurePosixPath(path).parents]
    existing = [f for f in folders if files.exists(posixpath.join(f, "pyproject.toml"))]
    for folder in existing:
        project = files.project(posixpath.join(folder, "pyproject.toml"))
        if project is not None:
            return project
    folder = existing[0] if existing else ""
    return _Project(posixpath.join(folder, "pyproject.toml"), folder, frozenset())


def _read_project(pyproject: str, text: str, head_sha: str) -> _Project | None:
    where = f"{pyproject} at commit {head_sha[:12]}"
    try:
        table = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"not valid TOML: {err}", where=where, fix="fix the TOML syntax") from None
    if "kernelpilot" not in table:
        return None
    try:
        config = ProjectConfig.model_validate(table["kernelpilot"])
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise UserError(
            f"invalid [tool.kernelpilot] setting: {first['msg']}",
            where=f"{where}: tool.kernelpilot.{key}",
            fix="see the README's configuration section for the allowed keys and values",
        ) from None
    folder = posixpath.dirname(pyproject)
    targets = set()
    for entry in config.targets:
        file, _, class_name = entry.module.partition(":")
        targets.add((posixpath.normpath(posixpath.join(folder, file)), class_name))
    return _Project(pyproject, folder, frozenset(targets))


# --- git ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _DiffEntry:
    """One line of ``git diff --raw``: blobs are addressed by SHA, never by (untrusted) path."""

    status: str  # A, M, D, R, T (one letter; R without its score)
    path: str  # head path; for a deletion, the base path
    old_path: str | None
    old_blob: str
    new_blob: str
    new_mode: str

    def is_python(self) -> bool:
        return self.path.endswith(".py") or (self.old_path or "").endswith(".py")

    def readable(self) -> bool:
        """Head has this file as a regular .py file (not deleted, not a link or submodule)."""
        return self.status != "D" and self.path.endswith(".py") and self.new_mode in REGULAR_MODES

    def record(self) -> ChangedFile:
        status = {"A": "added", "D": "deleted", "R": "renamed"}.get(self.status, "modified")
        return ChangedFile(path=self.path, old_path=self.old_path, status=status)  # type: ignore[arg-type]


def _diff(repo: Path, merge_base: str, head_sha: str) -> list[_DiffEntry]:
    options = ["--raw", "-z", "-M", "--no-abbrev", "--no-color", "--no-ext-diff", "--no-textconv"]
    fields = _git(repo, ["diff", *options, merge_base, head_sha]).split(b"\0")
    entries = []
    position = 0
    while position < len(fields) and fields[position].startswith(b":"):
        _, new_mode, old_blob, new_blob, status = fields[position][1:].decode().split(" ")
        paths = 2 if status[0] in "RC" else 1
        names = [_path(field) for field in fields[position + 1 : position + 1 + paths]]
        position += 1 + paths
        old_path, path = (names[0], names[1]) if paths == 2 else (None, names[0])
        entries.append(_DiffEntry(status[0], path, old_path, old_blob, new_blob, new_mode))
    return entries


class _HeadFiles:
    """The head commit's files (``bot.modules.Sources``): listed once, read and parsed lazily
    and once each; the changed files are read up front in one ``git cat-file --batch``."""

    def __init__(self, repo: Path, head_sha: str, prefetch: list[str]) -> None:
        self._repo = repo
        self.head_sha = head_sha
        listing = _git(repo, ["ls-tree", "-r", "-z", "--full-tree", head_sha]).split(b"\0")
        self._blobs: dict[str, str] = {}
        for line in filter(None, listing):
            meta, _, name = line.partition(b"\t")
            mode, kind, sha = meta.decode().split(" ")
            if kind == "blob" and mode in REGULAR_MODES:
                self._blobs[_path(name)] = sha
        self._contents = _read_blobs(repo, prefetch)
        self._loaded: dict[str, tuple[ast.Module, str] | SkippedFile] = {}
        self._projects: dict[str, _Project | None] = {}

    def exists(self, path: str) -> bool:
        return path in self._blobs

    def parsed(self, path: str) -> ast.Module | None:
        loaded = self.load(path) if path in self._blobs else None
        return loaded[0] if isinstance(loaded, tuple) else None

    def load(self, path: str) -> tuple[ast.Module, str] | SkippedFile:
        """The parsed file and its text, or why it cannot be looked at."""
        if path not in self._loaded:
            self._loaded[path] = self._parse(path)
        return self._loaded[path]

    def project(self, pyproject: str) -> _Project | None:
        if pyproject not in self._projects:
            text = self._text(pyproject)
            config = (
                None
                if isinstance(text, SkippedFile)
                else _read_project(pyproject, text, self.head_sha)
            )
            self._projects[pyproject] = config
        return self._projects[pyproject]

    def _text(self, path: str) -> str | SkippedFile:
        sha = self._blobs[path]
        if sha not in self._contents:
            self._contents.update(_read_blobs(self._repo, [sha]))
        content = self._contents[sha]
        if isinstance(content, int):
            reason = (
                f"{content:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit: skipped as generated"
            )
            return SkippedFile(path=path, kind="too_large", reason=reason)
        try:
            if b"\0" in content:
                raise UnicodeDecodeError("utf-8", content, 0, 1, "NUL byte")
            return content.decode("utf-8-sig")
        except UnicodeDecodeError:
            return SkippedFile(path=path, kind="binary", reason="binary or not UTF-8: skipped")

    def _parse(self, path: str) -> tuple[ast.Module, str] | SkippedFile:
        text = self._text(path)
        if isinstance(text, SkippedFile):
            return text
        try:
            return ast.parse(text, filename=path), text
        except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
            line = getattr(err, "lineno", None)
            message = getattr(err, "msg", None) or type(err).__name__
            where = f" at line {line}" if line else ""
            reason = (
                f"syntax error{where}: {message}; its modules are not looked at until it parses"
            )
            return SkippedFile(path=path, kind="syntax_error", reason=reason)


def _read_blobs(repo: Path, shas: list[str]) -> dict[str, bytes | int]:
    """Blob contents by SHA in two git calls; a blob over MAX_FILE_BYTES is left unread and
    stands as its size."""
    shas = list(dict.fromkeys(shas))
    if not shas:
        return {}
    listing = _git(repo, ["cat-file", "--batch-check"], stdin="\n".join(shas).encode() + b"\n")
    sizes = [_blob_size(header) for header in listing.splitlines()]
    result: dict[str, bytes | int] = {
        sha: size for sha, size in zip(shas, sizes, strict=True) if size > MAX_FILE_BYTES
    }
    small = [sha for sha in shas if sha not in result]
    if not small:
        return result
    output = _git(repo, ["cat-file", "--batch"], stdin="\n".join(small).encode() + b"\n")
    position = 0
    for sha in small:
        header_end = output.index(b"\n", position)
        size = _blob_size(output[position:header_end])
        result[sha] = output[header_end + 1 : header_end + 1 + size]
        position = header_end + 1 + size + 1  # the content is followed by a newline
    return result


def _blob_size(header: bytes) -> int:
    """The size in a ``cat-file`` header ``<sha> blob <size>``; the SHAs came from git itself, so
    anything else (``<sha> missing``: a corrupt or partial clone) is not the PR's fault."""
    fields = header.decode(errors="replace").split()
    if len(fields) != 3 or fields[1] != "blob":
        raise RuntimeError(f"git cat-file could not read a blob: {' '.join(fields)}")
    return int(fields[2])


def _path(raw: bytes) -> str:
    # Paths are bytes in git; an invalid UTF-8 name maps the same way everywhere it is looked up.
    return raw.decode("utf-8", "replace")


def _check_repository(repo: Path) -> None:
    if not repo.is_dir():
        raise UserError("no such folder", where=str(repo), fix="name the repository's folder")
    result = _run(repo, ["rev-parse", "--git-dir"])
    if result.returncode != 0:
        raise UserError(
            "not a git repository",
            where=str(repo),
            fix=f"run in a git checkout of the project (git said: {_said(result)})",
        )


def _resolve(repo: Path, ref: str, role: str) -> str:
    """The commit a ref names; a ref that could read as an option is refused, not passed."""
    if not ref or ref.startswith("-") or "\0" in ref:
        raise UserError(
            f"{role} ref {ref!r} is not a ref", where=str(repo), fix="name a branch, tag or commit"
        )
    result = _run(
        repo, ["rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}"]
    )
    if result.returncode != 0:
        raise UserError(
            f"unknown {role} ref {ref!r}",
            where=f"git repository {repo}",
            fix=f"fetch it first (git fetch origin {ref}; with actions/checkout, fetch-depth: 0) "
            "or name an existing branch, tag or commit",
        )
    return result.stdout.decode().strip()


def _merge_base(repo: Path, base_sha: str, head_sha: str, base: str, head: str) -> str:
    result = _run(repo, ["merge-base", base_sha, head_sha])
    if result.returncode != 0:
        raise UserError(
            f"base {base!r} and head {head!r} have no commit in common",
            where=f"git repository {repo}",
            fix="a shallow clone hides it: fetch the full history (git fetch --unshallow; with "
            "actions/checkout, fetch-depth: 0), or compare against the branch the PR targets",
        )
    return result.stdout.decode().strip()


def _git(repo: Path, args: list[str], stdin: bytes | None = None) -> bytes:
    """git's output; a failure here is ours (the commits were checked), so it raises."""
    result = _run(repo, args, stdin)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {_said(result)}")
    return result.stdout


def _run(
    repo: Path, args: list[str], stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        return subprocess.run(
            ["git", *args], cwd=repo, input=stdin, capture_output=True, env=environment, check=False
        )
    except FileNotFoundError:
        raise UserError("git is not installed", where="PATH", fix="install git") from None


def _said(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode(errors="replace").strip() or f"exit {result.returncode}"
