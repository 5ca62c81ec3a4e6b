"""Git objects as GitHub stores them: blobs, trees and commits under git's own ids.

A commit of the state keeps its whole tree flat (path -> bytes, plus the paths whose mode is not
100644); the nested tree objects and blobs of every commit are written here too, so the Git Data
API can name them, read them and build new trees on them. A repository and its forks share one
``Objects``, as they share their commits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

FILE_MODE = "100644"
BLOB_MODES = ("100644", "100755", "120000")  # file, executable, symlink
TREE_MODE = "040000"
SUBMODULE_MODE = "160000"


def blob_sha(data: bytes) -> str:
    """The git blob id, as GitHub reports a file's ``sha`` (and wants it back on update)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass(frozen=True)
class TreeEntry:
    name: str
    mode: str  # as the API writes it: 100644, 100755, 120000 or 040000
    sha: str

    @property
    def type(self) -> str:
        return "tree" if self.mode == TREE_MODE else "blob"

    def raw(self) -> bytes:
        mode = self.mode.lstrip("0")  # git writes a tree's mode as 40000
        return f"{mode} {self.name}".encode() + b"\0" + bytes.fromhex(self.sha)


@dataclass
class Objects:
    """The blobs and trees of a repository network."""

    blobs: dict[str, bytes] = field(default_factory=dict)
    trees: dict[str, list[TreeEntry]] = field(default_factory=dict)

    def write_blob(self, data: bytes) -> str:
        sha = blob_sha(data)
        self.blobs[sha] = data
        return sha

    def write_tree(self, files: dict[str, bytes], modes: dict[str, str]) -> str:
        """Store the blobs and nested trees of a flat tree; the root tree's sha."""
        entries: list[TreeEntry] = []
        folders: dict[str, dict[str, bytes]] = {}
        for path, data in files.items():
            folder, slash, rest = path.partition("/")
            if slash:
                folders.setdefault(folder, {})[rest] = data
            else:
                entries.append(TreeEntry(path, modes.get(path, FILE_MODE), self.write_blob(data)))
        for folder, inner in folders.items():
            prefix = f"{folder}/"
            inner_modes = {
                p.removeprefix(prefix): m for p, m in modes.items() if p.startswith(prefix)
            }
            entries.append(TreeEntry(folder, TREE_MODE, self.write_tree(inner, inner_modes)))
        # git's order: by name, a tree's name taken as if it ended in "/"
        entries.sort(key=lambda e: e.name.encode() + (b"/" if e.type == "tree" else b""))
        raw = b"".join(entry.raw() for entry in entries)
        sha = hashlib.sha1(b"tree %d\0" % len(raw) + raw).hexdigest()
        self.trees[sha] = entries
        return sha

    def walk(self, sha: str, prefix: str = "") -> Iterator[tuple[str, TreeEntry]]:
        """Every entry under tree ``sha`` with its full path, a tree before what it holds."""
        for entry in self.trees[sha]:
            yield prefix + entry.name, entry
            if entry.type == "tree":
                yield from self.walk(entry.sha, f"{prefix}{entry.name}/")

    def read_tree(self, sha: str) -> tuple[dict[str, bytes], dict[str, str]]:
        """The flat files of tree ``sha`` and the modes of those that are not 100644."""
        files, modes = {}, {}
        for path, entry in self.walk(sha):
            if entry.type == "blob":
                files[path] = self.blobs[entry.sha]
                if entry.mode != FILE_MODE:
                    modes[path] = entry.mode
        return files, modes


@dataclass(frozen=True)
class Signature:
    """A commit's author or committer line."""

    name: str
    email: str
    date: str  # ISO 8601 in UTC, as GitHub answers it: 2026-01-31T12:00:00Z

    def raw(self) -> str:
        stamp = datetime.strptime(self.date, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
        return f"{self.name} <{self.email}> {int(stamp.timestamp())} +0000"


def utc_date(text: str) -> str:
    """An ISO 8601 date (``Z`` or an offset) in UTC as GitHub writes it; ValueError if none."""
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def commit_sha(
    tree: str, parents: list[str], author: Signature, committer: Signature, message: str
) -> str:
    """The id git gives the commit object of these fields."""
    lines = [
        f"tree {tree}",
        *(f"parent {p}" for p in parents),
        f"author {author.raw()}",
        f"committer {committer.raw()}",
        "",
        message,
    ]
    raw = "\n".join(lines).encode()
    return hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest()
