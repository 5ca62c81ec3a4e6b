"""The user's files as kernelpilot reads and writes them: every source and configuration file is
UTF-8, and a file that cannot be read, or a folder that cannot be written, is a UserError
naming it (never a UnicodeDecodeError or an OSError's traceback)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness.errors import UserError

UTF8_FIX = "save it as UTF-8 (kernelpilot reads every source and configuration file as UTF-8)"


def read_user_text(path: Path, what: str = "file") -> str:
    """The text of a file the user gave (a module, a candidate, a pyproject.toml, a script),
    decoded as UTF-8 (a leading byte-order mark dropped, as Python and pip do)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UserError(f"{what} not found: {path}", fix="check the path") from None
    except IsADirectoryError:
        raise UserError(
            f"{what} {path} is a folder, not a file", where=str(path), fix="name a file"
        ) from None
    except OSError as err:
        raise UserError(
            f"cannot read {what}: {err.strerror}", where=str(path), fix="check the file"
        ) from None
    return decode_user_text(raw, str(path))


def decode_user_text(raw: bytes, where: str) -> str:
    """``raw`` as UTF-8 text; bytes that are not say where they are (``where`` names the file)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise UserError(
            f"not UTF-8: byte {err.start} (0x{raw[err.start]:02x}, line {line}): {err.reason}",
            where=f"{where}, byte {err.start}",
            fix=UTF8_FIX,
        ) from None
    return text.removeprefix("\ufeff")


def output_folder(path: Path, what: str = "output folder") -> Path:
    """``path`` as a folder that exists (made with its parents) and takes new files, or why it
    cannot be one: checked before any work, so no result is lost to it afterwards."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except (FileExistsError, NotADirectoryError):
        found = "is a file" if path.exists() else "is under a file"
        raise UserError(
            f"the {what} {path} {found}, not a folder",
            where=str(path),
            fix="name a folder (it is made if it does not exist)",
        ) from None
    except OSError as err:
        raise UserError(
            f"cannot write in {path} ({err.strerror})",
            where=str(path),
            fix="name a folder you can write to",
        ) from None
    return path
