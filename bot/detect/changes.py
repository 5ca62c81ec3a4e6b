"""From a base and a head commit, the changed ``nn.Module`` classes and how to run each.

The diff is ``git diff base...head``: from the merge base to head, what GitHub's "Files changed"
tab shows. So base need not be an ancestor of head (the base branch may have moved on since the
PR branched), and changes made on the base branch meanwhile are not the PR's. Every file is read
from the head commit's objects (``git cat-file``), never from the work tree, so detection sees
exactly the commit it names whatever is checked out. Refs and paths are untrusted: git runs with
list arguments, refs are passed after ``--end-of-options``, and blobs are addressed by SHA.

A class is changed when its own lines are, when a helper of its file that it uses is
(``bot.detect.uses``), or, across the repository, when a class it derives from or uses changed
(``bot.detect.related``: names resolved through the imports, ``bot.detect.imports``). A file or
class whose edit only touched comments, docstrings or formatting is not queued, and the report
says so (``bot.detect.cosmetic``). The cap keeps that order: the classes the diff touched first,
then their subclasses, then their users.

Bad input in the PR is reported per file (a syntax error, a binary or huge file, a deleted
file) and the other files go on; bad input from whoever calls this (an unknown ref, histories
with no common commit, a broken ``[tool.kernelpilot]``) is a ``UserError``. Which classes are
modules is ``bot.detect.modules``; the head commit's files and configuration, ``bot.detect.head``.
"""

from __future__ import annotations

from pathlib import Path

from bot.detect.examine import Examiner, has_base
from bot.detect.head import HeadFiles, SkippedFile, base_trees
from bot.detect.records import ChangedFile, ChangedModule, ChangeReport
from bot.git import DiffEntry, check_repository, diff_entries, find_merge_base, resolve
from harness.errors import UserError

# The records live in bot.detect.records; callers import them from here, with detect_changes.
__all__ = ["ChangedFile", "ChangedModule", "ChangeReport", "SkippedFile", "detect_changes"]


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
    examiner = Examiner(repo, files, base_trees(repo, [e.old_blob for e in entries if has_base(e)]))
    found: list[ChangedModule] = []
    cosmetic: list[ChangedModule] = []
    skipped: list[SkippedFile] = []
    for entry in entries:
        outcome = examiner.examine(entry)
        if isinstance(outcome, SkippedFile):
            skipped.append(outcome)
        else:
            found += outcome[0]
            cosmetic += outcome[1]
    related = examiner.related(found)
    changed_keys = {(module.path, module.class_name) for module in related}
    modules, over_cap = _apply_cap(found + related, max_targets)
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
        cosmetic=[m for m in cosmetic if (m.path, m.class_name) not in changed_keys],
        notes=[files.search_note()] if files.unsearched else [],
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
def _file_record(entry: DiffEntry) -> ChangedFile:
    status = {"A": "added", "D": "deleted", "R": "renamed"}.get(entry.status, "modified")
    return ChangedFile(path=entry.path, old_path=entry.old_path, status=status)  # type: ignore[arg-type]
