"""The head commit of a pull request as change detection reads it: its files, listed once and
read and parsed lazily (``bot.detect.imports.Sources``), and the ``[tool.kernelpilot]``
configuration that governs each file. Files are read from git's objects, never from the work
tree; the base commit's changed files too (``base_trees``), by their blobs' SHAs."""

from __future__ import annotations

import ast
import posixpath
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field

from bot.git import MAX_FILE_BYTES, REGULAR_MODES, decoded_path, git, read_blobs
from bot.settings import settings_from_table
from harness.errors import UserError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


# Searching the whole head commit for importers reads at most this much (a monorepo's vendored
# trees past it are not searched, and the report says so).
MAX_SEARCHED_FILES = 20_000
MAX_SEARCHED_BYTES = 200_000_000
_BATCH = 200
_IDENTIFIER = re.compile(r"\w")
# Bytes that continue a Python identifier (any non-ASCII byte may be part of one).
_IDENTIFIER_BYTES = frozenset(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"
) | frozenset(range(128, 256))


class SkippedFile(BaseModel):
    """A changed ``.py`` file whose modules could not be looked at, or need not be (``cosmetic``:
    only comments, docstrings or formatting changed), and why."""

    path: str
    kind: Literal["deleted", "syntax_error", "binary", "too_large", "not_a_file", "cosmetic"]
    reason: str = Field(description="One sentence for the PR comment.")


@dataclass(frozen=True)
class HeadProject:
    """The pyproject.toml that governs a file: its configured targets (repository paths)."""

    pyproject: str
    folder: str
    targets: frozenset[tuple[str, str]]


def project_for(files: HeadFiles, path: str) -> HeadProject:
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
    return HeadProject(posixpath.join(folder, "pyproject.toml"), folder, frozenset())


def read_project(pyproject: str, text: str, head_sha: str) -> HeadProject | None:
    where = f"{pyproject} at commit {head_sha[:12]}"
    try:
        table = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"not valid TOML: {err}", where=where, fix="fix the TOML syntax") from None
    if "kernelpilot" not in table:
        return None
    config = settings_from_table(table["kernelpilot"], where)
    folder = posixpath.dirname(pyproject)
    targets = set()
    for entry in config.targets:
        file, _, class_name = entry.module.partition(":")
        targets.add((posixpath.normpath(posixpath.join(folder, file)), class_name))
    return HeadProject(pyproject, folder, frozenset(targets))


class HeadFiles:
    """The head commit's files (``bot.detect.modules.Sources``): listed once, read and parsed lazily
    and once each; the changed files are read up front in one ``git cat-file --batch``."""

    def __init__(self, repo: Path, head_sha: str, prefetch: list[str]) -> None:
        self._repo = repo
        self.head_sha = head_sha
        listing = git(repo, ["ls-tree", "-r", "-z", "--full-tree", head_sha]).split(b"\0")
        self._blobs: dict[str, str] = {}
        for line in filter(None, listing):
            meta, _, name = line.partition(b"\t")
            mode, kind, sha = meta.decode().split(" ")
            if kind == "blob" and mode in REGULAR_MODES:
                self._blobs[decoded_path(name)] = sha
        self._contents = read_blobs(repo, prefetch)
        self._loaded: dict[str, tuple[ast.Module, str] | SkippedFile] = {}
        self._projects: dict[str, HeadProject | None] = {}
        self._searchable: list[tuple[str, bytes]] | None = None
        self._mentions: dict[str, list[str]] = {}
        self.unsearched = 0  # .py files left out of mentioning(), over the limits

    def python_files(self) -> list[str]:
        return sorted(path for path in self._blobs if path.endswith(".py"))

    def mentioning(self, word: str) -> list[str]:
        """The ``.py`` files whose text contains ``word`` as a whole word (``Mlp`` is not in
        ``MlpMixer``; ``from .`` is in ``from .model``): the cheap cut before parsing, so that
        following imports across the repository parses only the files that could matter. The
        first call reads every ``.py`` file of the commit, in a few ``git cat-file`` calls, up to
        MAX_SEARCHED_FILES files and MAX_SEARCHED_BYTES bytes."""
        if self._searchable is None:
            self._searchable = self._read_searchable()
        if word not in self._mentions:
            needle = word.encode()
            left, right = _IDENTIFIER.match(word[:1]), _IDENTIFIER.match(word[-1:])
            self._mentions[word] = [
                path
                for path, content in self._searchable
                if _mentions(content, needle, bool(left), bool(right))
            ]
        return self._mentions[word]

    def search_note(self) -> str:
        """What the report says when mentioning() left files out."""
        return (
            f"{self.unsearched:,} of the head commit's {len(self.python_files()):,} Python files "
            "were not searched for subclasses and users of the changed modules (over the limit "
            f"of {MAX_SEARCHED_FILES:,} files or {MAX_SEARCHED_BYTES // 1_000_000:,} MB)."
        )

    def _read_searchable(self) -> list[tuple[str, bytes]]:
        """The files mentioning() searches, read a batch at a time until a limit is reached; a
        file over MAX_FILE_BYTES is generated and left out (it stands as its size)."""
        paths = self.python_files()
        searchable: list[tuple[str, bytes]] = []
        total = 0
        for position, path in enumerate(paths):
            if position % _BATCH == 0:
                batch = [self._blobs[p] for p in paths[position : position + _BATCH]]
                fresh = [sha for sha in batch if sha not in self._contents]
                self._contents.update(read_blobs(self._repo, fresh))
            content = self._contents[self._blobs[path]]
            if isinstance(content, int):
                continue
            total += len(content)
            if position >= MAX_SEARCHED_FILES or total > MAX_SEARCHED_BYTES:
                self.unsearched = len(paths) - position
                break
            searchable.append((path, content))
        return searchable

    def exists(self, path: str) -> bool:
        return path in self._blobs

    def paths_ending(self, *suffixes: str) -> list[str]:
        return sorted(path for path in self._blobs if path.lower().endswith(suffixes))

    def texts(self, paths: list[str]) -> list[tuple[str, str]]:
        """Those files' texts, read in one ``git cat-file`` call; a file too large or not
        text is left out."""
        fresh = [self._blobs[path] for path in paths if self._blobs[path] not in self._contents]
        self._contents.update(read_blobs(self._repo, fresh))
        found = [(path, self._text(path)) for path in paths]
        return [(path, text) for path, text in found if isinstance(text, str)]

    def parsed(self, path: str) -> ast.Module | None:
        loaded = self.load(path) if path in self._blobs else None
        return loaded[0] if isinstance(loaded, tuple) else None

    def load(self, path: str) -> tuple[ast.Module, str] | SkippedFile:
        """The parsed file and its text, or why it cannot be looked at."""
        if path not in self._loaded:
            self._loaded[path] = self._parse(path)
        return self._loaded[path]

    def project(self, pyproject: str) -> HeadProject | None:
        if pyproject not in self._projects:
            text = self._text(pyproject)
            config = (
                None
                if isinstance(text, SkippedFile)
                else read_project(pyproject, text, self.head_sha)
            )
            self._projects[pyproject] = config
        return self._projects[pyproject]

    def _text(self, path: str) -> str | SkippedFile:
        sha = self._blobs[path]
        if sha not in self._contents:
            self._contents.update(read_blobs(self._repo, [sha]))
        return decode(path, self._contents[sha])

    def _parse(self, path: str) -> tuple[ast.Module, str] | SkippedFile:
        text = self._text(path)
        return text if isinstance(text, SkippedFile) else parse(path, text)


def _mentions(content: bytes, needle: bytes, left: bool, right: bool) -> bool:
    """``needle`` occurs in ``content`` not inside a longer identifier, checked on the ``left``
    and ``right`` sides where the needle ends in an identifier character."""
    start = content.find(needle)
    while start != -1:
        end = start + len(needle)
        before = start == 0 or content[start - 1] not in _IDENTIFIER_BYTES
        after = end == len(content) or content[end] not in _IDENTIFIER_BYTES
        if (before or not left) and (after or not right):
            return True
        start = content.find(needle, start + 1)
    return False


def base_trees(repo: Path, shas: list[str]) -> dict[str, ast.Module]:
    """The base commit's versions of changed files, parsed, by blob SHA (read in one batch, as
    the head's are). A blob that is too large, binary or not valid Python is left out: its file
    is then judged by its changed lines alone."""
    trees = {}
    for sha, content in read_blobs(repo, shas).items():
        text = decode(sha, content)
        loaded = text if isinstance(text, SkippedFile) else parse(sha, text)
        if isinstance(loaded, tuple):
            trees[sha] = loaded[0]
    return trees


def decode(path: str, content: bytes | int) -> str | SkippedFile:
    """A blob's text; a blob over MAX_FILE_BYTES stands as its size."""
    if isinstance(content, int):
        reason = f"{content:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit: skipped as generated"
        return SkippedFile(path=path, kind="too_large", reason=reason)
    try:
        if b"\0" in content:
            raise UnicodeDecodeError("utf-8", content, 0, 1, "NUL byte")
        return content.decode("utf-8-sig")
    except UnicodeDecodeError:
        return SkippedFile(path=path, kind="binary", reason="binary or not UTF-8: skipped")


def parse(path: str, text: str) -> tuple[ast.Module, str] | SkippedFile:
    try:
        return ast.parse(text, filename=path), text
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        line = getattr(err, "lineno", None)
        message = getattr(err, "msg", None) or type(err).__name__
        where = f" at line {line}" if line else ""
        reason = f"syntax error{where}: {message}; its modules are not looked at until it parses"
        return SkippedFile(path=path, kind="syntax_error", reason=reason)
