"""The trajectory: the whole search of one target (every node's plan, code, verdict, tokens,
cost and seeds), saved as JSON after every step.

Reports render from it, ``--resume`` continues it without redoing what it holds, and a saved
one replays to the same tree (tests).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from agents.search.budget import Budget
from agents.search.tree import Tree
from harness.records import Problem

VERSION = 1


class Trajectory(BaseModel):
    version: int = VERSION
    target: str
    problem: Problem
    llm: str = Field(description="Who proposed: 'offline', or the model's name.")
    strategy: str
    seed: int = Field(description="Seeds the search's own choices (epsilon-greedy).")
    budget: Budget
    tree: Tree
    steps: int = 0
    stopped: str = Field(default="", description="Why the search ended; empty while it runs.")

    def save(self, path: Path) -> None:
        """Written whole to a temporary file, then renamed over: never half a file."""
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(self.model_dump_json(indent=1))
        os.replace(partial, path)

    @classmethod
    def load(cls, path: Path) -> Trajectory:
        from harness.errors import UserError
        from harness.files import read_user_text

        fix = "pass the trajectory-*.json that an earlier optimize run wrote to its --out"
        text = read_user_text(path, "trajectory")
        try:
            trajectory = cls.model_validate_json(text)
        except ValidationError as err:
            first = err.errors()[0]
            what = (
                f"it is not JSON ({first['msg']})"
                if first["type"] == "json_invalid"
                else f"{len(err.errors())} field(s) do not hold a trajectory's values: "
                + _fields(err)
            )
            raise UserError(
                f"cannot resume from {path}: {what}",
                where=str(path),
                fix=fix,
            ) from None
        if trajectory.version != VERSION:
            raise UserError(
                f"trajectory version {trajectory.version}; this kernelpilot reads {VERSION}",
                where=str(path),
                fix="start a new run (without --resume)",
            )
        return trajectory


def _fields(err: ValidationError, shown: int = 3) -> str:
    """The first fields a validation error names, each with what was wrong and what it held."""
    parts = []
    for error in err.errors()[:shown]:
        where = ".".join(str(part) for part in error["loc"]) or "the file"
        held = "" if error["type"] == "missing" else f" (it holds {str(error['input'])[:60]!r})"
        parts.append(f"{where}: {error['msg']}{held}")
    return "; ".join(parts)
