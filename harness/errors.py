"""User-facing errors (what was wrong, where, and what to do), and kernelpilot's own failures."""

from __future__ import annotations


class UserError(Exception):
    """Bad input from the user. The CLI prints it without a traceback and exits non-zero."""

    def __init__(self, what: str, where: str = "", fix: str = "") -> None:
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"error: {self.what}"]
        if self.where:
            lines.append(f"  where: {self.where}")
        if self.fix:
            lines.append(f"  fix: {self.fix}")
        return "\n".join(lines)


KERNELPILOT_BUG = "kernelpilot failed (this is a kernelpilot bug; please report it)"


class HarnessError(RuntimeError):
    """kernelpilot's own code failed in a worker: not the user's input, not the candidate's
    kernel. Raised (our bugs raise), with the worker's traceback in its text."""
