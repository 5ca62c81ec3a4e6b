"""The follow-up's files written into a local folder (``kernelpilot review --write-followup
DIR``): what publish would push on the follow-up branch, to try without GitHub.

The files go at their repository-relative paths under DIR, so DIR is usually the repository
itself (or a clone of it): the drop-in imports the user's module from beside it and the test
finds both from its own place, as on the follow-up branch. Each kernel file passes the same gate
publish applies before it pushes (``bot.pr.trust.kernel_reasons``).

Nothing the user has is lost: every file is checked before any is written, and a file already
there with other content stops the whole write (``force`` replaces it); one with the same
content is left as it is. A path that leads out of DIR through a link, or onto a link or a
folder, is refused whatever ``force`` says.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from pydantic import BaseModel

from bot.pr.followup import Followup, FollowupFile
from bot.pr.results import safe_relative_path
from bot.pr.trust import kernel_reasons
from harness.errors import UserError

WHERE = "kernelpilot review --write-followup"


class WriteState(str, Enum):
    written = "written"  # a new file
    unchanged = "unchanged"  # there already, with this content
    replaced = "replaced"  # there with other content, replaced under --force


class WrittenFile(BaseModel):
    path: str  # relative to the folder, as on the follow-up branch
    state: WriteState


def write_followup(followup: Followup, folder: Path, force: bool) -> list[WrittenFile]:
    """Write the follow-up's files under ``folder`` (made if missing); what happened to each.
    A UserError, before anything is written, for a file that would be lost or a path that
    leaves ``folder``."""
    root = folder.resolve()
    plan = [(file, _state(file, root, force)) for file in followup.files]
    for file, state in plan:
        if state is WriteState.unchanged:
            continue
        target = root / file.path
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(file.content, encoding="utf-8")
        except OSError as err:
            raise UserError(
                f"cannot write {file.path} ({err.strerror})",
                where=str(target),
                fix="name a folder you can write to",
            ) from None
    return [WrittenFile(path=file.path, state=state) for file, state in plan]


def _state(file: FollowupFile, root: Path, force: bool) -> WriteState:
    """What writing ``file`` under ``root`` would do; a UserError where it must not be done."""
    relative = safe_relative_path(file.path, WHERE)
    if file.reference_class is not None:
        reasons = kernel_reasons(file.content, file.reference_class, file.dtype)
        if reasons:
            raise UserError(
                f"the kernel file {file.path} fails the gate: {'; '.join(reasons)}",
                where=WHERE,
                fix="report it: publish would refuse this kernel too (a kernelpilot bug)",
            )
    target = root / relative
    if not _inside(target.parent, root):
        raise UserError(
            f"{file.path} would be written outside {root}: a folder on its way is a link",
            where=str(target),
            fix="write the follow-up into a folder without links on these paths",
        )
    if target.is_symlink() or (target.exists() and not target.is_file()):
        raise UserError(
            f"{file.path} is there and is not a plain file",
            where=str(target),
            fix="move it away, or write the follow-up into another folder",
        )
    if not target.exists():
        return WriteState.written
    if target.read_bytes() == file.content.encode("utf-8"):
        return WriteState.unchanged
    if force:
        return WriteState.replaced
    raise UserError(
        f"{file.path} is there with other content; nothing was written",
        where=str(target),
        fix="pass --force to replace it (a file of the follow-up kernelpilot wrote before), "
        "or move it away or write into another folder",
    )


def _inside(folder: Path, root: Path) -> bool:
    """``folder`` (which may not exist yet) resolves to ``root`` or below it."""
    return folder.resolve() == root or folder.resolve().is_relative_to(root)
