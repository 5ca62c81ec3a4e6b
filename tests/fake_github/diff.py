"""The files of a compare with GitHub's unified patches, and the lines a review may point at."""

from __future__ import annotations

import difflib
import re
from typing import Any

from .git import blob_sha

HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+(?P<new>\d+)(?:,\d+)? @@")


def diff_files(base: dict[str, bytes], head: dict[str, bytes]) -> list[dict[str, Any]]:
    """The files of a compare, each with GitHub's unified ``patch`` (hunks, no file headers)."""
    files = []
    for path in sorted(base.keys() | head.keys()):
        old, new = base.get(path), head.get(path)
        if old == new:
            continue
        lines = list(
            difflib.unified_diff(
                (old or b"").decode(errors="replace").splitlines(),
                (new or b"").decode(errors="replace").splitlines(),
                lineterm="",
                n=3,
            )
        )[2:]
        additions = sum(line.startswith("+") for line in lines)
        deletions = sum(line.startswith("-") for line in lines)
        status = "added" if old is None else "removed" if new is None else "modified"
        files.append(
            {
                "filename": path,
                "status": status,
                "additions": additions,
                "deletions": deletions,
                "changes": additions + deletions,
                "patch": "\n".join(lines),
                "sha": blob_sha(new or b""),
            }
        )
    return files


def file_entry(entry: str | dict[str, Any]) -> dict[str, Any]:
    """A seeded PR file: a name (modified, no patch) or a dict of GitHub's File fields."""
    base = {"status": "modified", "additions": 0, "deletions": 0, "changes": 0}
    return base | ({"filename": entry} if isinstance(entry, str) else entry)


def diff_lines(patch: str | None) -> dict[str, set[int]] | None:
    """The lines a review comment may point at, per side; None when there is no patch."""
    if patch is None:
        return None
    sides: dict[str, set[int]] = {"LEFT": set(), "RIGHT": set()}
    old = new = 0
    for line in patch.splitlines():
        if match := HUNK.match(line):
            old, new = int(match["old"]), int(match["new"])
        elif line.startswith("+"):
            sides["RIGHT"].add(new)
            new += 1
        elif line.startswith("-"):
            sides["LEFT"].add(old)
            old += 1
        elif not line.startswith("\\"):
            sides["LEFT"].add(old)
            sides["RIGHT"].add(new)
            old, new = old + 1, new + 1
    return sides
