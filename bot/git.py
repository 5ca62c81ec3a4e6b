"""The git side of change detection: the commits refs name, the diff from the merge base,
changed line numbers, blobs read by SHA. Only ``git`` touches repositories, run with list
arguments (refs and paths are untrusted: refs after ``--end-of-options``, blobs by SHA).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UserError

MAX_FILE_BYTES = 1_000_000  # a .py file larger than this is generated, not a hand-written module
REGULAR_MODES = ("100644", "100755")  # not a link (120000) or a submodule (160000)
_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")


def changed_lines(repo: Path, old_blob: str, new_blob: str) -> set[int]:
    """Head line numbers the diff adds or replaces. A pure deletion counts as a change on the
    head line just above it (line 1 at the top), so removing a statement changes its block."""
    diff = git(
        repo, ["diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", old_blob, new_blob]
    )
    changed: set[int] = set()
    for line in diff.splitlines():
        match = _HUNK.match(line)
        if match:
            start, count = int(match[1]), int(match[2] if match[2] is not None else 1)
            changed.update(range(start, start + count) if count else [max(start, 1)])
    return changed


@dataclass(frozen=True)
class DiffEntry:
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


def diff_entries(repo: Path, merge_base: str, head_sha: str) -> list[DiffEntry]:
    options = ["--raw", "-z", "-M", "--no-abbrev", "--no-color", "--no-ext-diff", "--no-textconv"]
    fields = git(repo, ["diff", *options, merge_base, head_sha]).split(b"\0")
    entries = []
    position = 0
    while position < len(fields) and fields[position].startswith(b":"):
        _, new_mode, old_blob, new_blob, status = fields[position][1:].decode().split(" ")
        paths = 2 if status[0] in "RC" else 1
        names = [decoded_path(field) for field in fields[position + 1 : position + 1 + paths]]
        position += 1 + paths
        old_path, path = (names[0], names[1]) if paths == 2 else (None, names[0])
        entries.append(DiffEntry(status[0], path, old_path, old_blob, new_blob, new_mode))
    return entries


def read_blobs(repo: Path, shas: list[str]) -> dict[str, bytes | int]:
    """Blob contents by SHA in two git calls; a blob over MAX_FILE_BYTES is left unread and
    stands as its size."""
    shas = list(dict.fromkeys(shas))
    if not shas:
        return {}
    listing = git(repo, ["cat-file", "--batch-check"], stdin="\n".join(shas).encode() + b"\n")
    sizes = [blob_size(header) for header in listing.splitlines()]
    result: dict[str, bytes | int] = {
        sha: size for sha, size in zip(shas, sizes, strict=True) if size > MAX_FILE_BYTES
    }
    small = [sha for sha in shas if sha not in result]
    if not small:
        return result
    output = git(repo, ["cat-file", "--batch"], stdin="\n".join(small).encode() + b"\n")
    position = 0
    for sha in small:
        header_end = output.index(b"\n", position)
        size = blob_size(output[position:header_end])
        result[sha] = output[header_end + 1 : header_end + 1 + size]
        position = header_end + 1 + size + 1  # the content is followed by a newline
    return result


def blob_size(header: bytes) -> int:
    """The size in a ``cat-file`` header ``<sha> blob <size>``; the SHAs came from git itself, so
    anything else (``<sha> missing``: a corrupt or partial clone) is not the PR's fault."""
    fields = header.decode(errors="replace").split()
    if len(fields) != 3 or fields[1] != "blob":
        raise RuntimeError(f"git cat-file could not read a blob: {' '.join(fields)}")
    return int(fields[2])


def decoded_path(raw: bytes) -> str:
    # Paths are bytes in git; an invalid UTF-8 name maps the same way everywhere it is looked up.
    return raw.decode("utf-8", "replace")


def check_repository(repo: Path, why: str = "") -> None:
    """``repo`` is in a git repository; ``why`` says what the command needs it for."""
    if not repo.is_dir():
        raise UserError("no such folder", where=str(repo), fix="name the repository's folder")
    result = run_git(repo, ["rev-parse", "--git-dir"])
    if result.returncode != 0:
        raise UserError(
            f"not in a git repository: {why}" if why else "not a git repository",
            where=str(repo),
            fix="run in a git checkout of the project, or name one with --repo "
            f"(git said: {said(result)})",
        )


def checked_out_commit(repo: Path, why: str) -> str:
    """The commit checked out in ``repo``: a UserError saying ``why`` it is needed outside a git
    repository, and another before its first commit."""
    check_repository(repo, why)
    result = run_git(repo, ["rev-parse", "--verify", "--quiet", "HEAD^{commit}"])
    if result.returncode != 0:
        raise UserError(
            "the repository has no commit yet", where=str(repo), fix="commit the project first"
        )
    return result.stdout.decode().strip()


def resolve(repo: Path, ref: str, role: str) -> str:
    """The commit a ref names; a ref that could read as an option is refused, not passed."""
    if not ref or ref.startswith("-") or "\0" in ref:
        raise UserError(
            f"{role} ref {ref!r} is not a ref", where=str(repo), fix="name a branch, tag or commit"
        )
    result = run_git(
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


def find_merge_base(repo: Path, base_sha: str, head_sha: str, base: str, head: str) -> str:
    result = run_git(repo, ["merge-base", base_sha, head_sha])
    if result.returncode != 0:
        raise UserError(
            f"base {base!r} and head {head!r} have no commit in common",
            where=f"git repository {repo}",
            fix="a shallow clone hides it: fetch the full history (git fetch --unshallow; with "
            "actions/checkout, fetch-depth: 0), or compare against the branch the PR targets",
        )
    return result.stdout.decode().strip()


def file_at(repo: Path, commit: str, path: str) -> bytes | None:
    """The file ``path`` (relative to the root) as it is in ``commit``; None where the commit
    has no such file. A file over MAX_FILE_BYTES is refused: a configuration is not that big."""
    spec = f"{commit}:{path}"
    found = run_git(repo, ["cat-file", "-s", spec])
    if found.returncode != 0:
        return None
    size = int(found.stdout.decode().strip())
    if size > MAX_FILE_BYTES:
        raise UserError(
            f"{size:,} bytes, over the {MAX_FILE_BYTES:,}-byte limit",
            where=f"{path} at commit {commit[:12]}",
            fix="keep [tool.kernelpilot] in a pyproject.toml of ordinary size",
        )
    return git(repo, ["cat-file", "blob", spec])


def git(repo: Path, args: list[str], stdin: bytes | None = None) -> bytes:
    """git's output; a failure here is ours (the commits were checked), so it raises."""
    result = run_git(repo, args, stdin)
    if result.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {said(result)}")
    return result.stdout


def run_git(
    repo: Path, args: list[str], stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    environment = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    try:
        return subprocess.run(
            ["git", *args], cwd=repo, input=stdin, capture_output=True, env=environment, check=False
        )
    except FileNotFoundError:
        raise UserError("git is not installed", where="PATH", fix="install git") from None


def said(result: subprocess.CompletedProcess[bytes]) -> str:
    return result.stderr.decode(errors="replace").strip() or f"exit {result.returncode}"


def uncommitted_configuration(repo: Path) -> list[str]:
    """The work tree's pyproject.toml files that differ from HEAD's (changed or untracked):
    change detection reads the commit's configuration, so these are not used yet."""
    listed = git(
        repo,
        ["status", "--porcelain", "--untracked-files=all", "-z", "--", ":(glob)**/pyproject.toml"],
    )
    return sorted(entry[3:].decode(errors="replace") for entry in listed.split(b"\0") if entry)
