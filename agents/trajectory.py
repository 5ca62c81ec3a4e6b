"""The trajectory: the whole search of one target (every node's plan, code, verdict, tokens,
cost and seeds), saved as JSON after every step.

Reports render from it, ``--resume`` continues it without redoing what it holds, and a saved
one replays to the same tree (tests).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

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

        try:
            trajectory = cls.model_validate_json(path.read_text())
        except (OSError, ValueError) as err:
            raise UserError(
                f"cannot resume from {path}: {str(err).splitlines()[0]}",
                where=str(path),
                fix="pass the trajectory-*.json that an earlier optimize run wrote to its --out",
            ) from err
        if trajectory.version != VERSION:
            raise UserError(
                f"trajectory version {trajectory.version}; this kernelpilot reads {VERSION}",
                where=str(path),
                fix="start a new run (without --resume)",
            )
        return trajectory
