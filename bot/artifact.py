"""An artifact one job wrote for another, read as untrusted input: the file there, under its
size cap, valid for its model (``bot.pr.results``, ``bot.nightly.results``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from harness.errors import UserError

Model = TypeVar("Model", bound=BaseModel)


def read_artifact(
    path: Path, model: type[Model], max_bytes: int, what: str, job: str, command: str
) -> Model:
    """``path`` read into ``model``, or a UserError that names it. ``what``: the file's name in
    messages ("results"); ``job``: the job that wrote it; ``command``: the command it ran."""
    where = str(path)
    if not path.is_file():
        raise UserError(
            f"no {what} to publish",
            where=where,
            fix=f"download the {job}'s artifact into this folder first",
        )
    size = path.stat().st_size
    if size > max_bytes:
        raise UserError(
            f"{what} file is {size} bytes, over {max_bytes}",
            where=where,
            fix="the measuring job wrote an unexpected file: do not publish it",
        )
    try:
        return model.model_validate_json(path.read_bytes())
    except ValidationError as err:
        first = err.errors()[0]
        raise UserError(
            f"{what} file is not valid: {first['msg']} at "
            f"{'.'.join(str(part) for part in first['loc'])}",
            where=where,
            fix=f"publish only what `{command}` of the same version wrote",
        ) from None
