"""The records change detection hands the runner and the comment: the changed files, the
changed modules (each matched to a target or the TOML lines to add), and what was skipped."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from bot.detect.head import SkippedFile


class ChangedFile(BaseModel):
    """A ``.py`` file the PR changed."""

    path: str = Field(
        description="Path in head, relative to the repository root (deleted: in base)."
    )
    old_path: str | None = Field(default=None, description="The path in base, for a renamed file.")
    status: Literal["added", "modified", "renamed", "deleted"]


class ChangedModule(BaseModel):
    """An nn.Module class the PR changed, and how kernelpilot would build its inputs."""

    path: str = Field(description="File in head, relative to the repository root.")
    class_name: str
    class_line: int = Field(description="Line of the ``class`` statement in head (for a review).")
    lines: list[int] = Field(
        description="The changed head lines of its file that make it changed (none where "
        "another file's class changed it)."
    )
    reason: str = Field(
        description="'class added', 'class body changed', 'helper X changed' (a top-level "
        "function, class or constant of the file it uses), 'base class X changed', "
        "'base class X changed (file.py)' or 'uses X (file.py), which changed' (another file's "
        "class it derives from or uses), or, for a module not queued, 'only comments, "
        "docstrings or formatting changed'."
    )
    relation: Literal["diff", "subclass", "user"] = Field(
        default="diff",
        description="What changed it: the diff's lines in its own file, a base class in another "
        "file, or a class of another file that it uses (users come last under the cap, and the "
        "comment names those without inputs on one line).",
    )
    target: str | None = Field(
        default=None, description="'path.py:Class' for the runner, relative to the repository root."
    )
    target_source: Literal["config", "get_inputs", "capture", "guess"] | None = Field(
        default=None,
        description="A [[tool.kernelpilot.targets]] entry, get_inputs() beside it, the "
        "repository's tests, examples or capture command, or a guess where none of them builds "
        "it (bot.detect.captured).",
    )
    capture_note: str | None = Field(
        default=None,
        description="What the capture saw: where the module was built and how called, or why "
        "it could not be a target.",
        max_length=500,
    )
    missing_config: str | None = Field(
        default=None, description="No target: the TOML lines to add to config_path."
    )
    config_path: str | None = Field(
        default=None, description="The pyproject.toml that missing_config goes into."
    )

    @property
    def key(self) -> str:
        """'path.py:Class': how targets, shards and the comment name it."""
        return f"{self.path}:{self.class_name}"


class ChangeReport(BaseModel):
    """What a PR changed, for the runner (``targets()``) and the comment (everything)."""

    base: str = Field(description="The base ref as given.")
    head: str = Field(description="The head ref as given.")
    base_sha: str
    head_sha: str
    merge_base: str = Field(description="The commit the diff starts from.")
    max_targets: int = Field(description="The cap on targets per run.")
    files: list[ChangedFile] = Field(default_factory=list)
    modules: list[ChangedModule] = Field(
        default_factory=list, description="Changed modules to optimize, and those lacking inputs."
    )
    skipped_files: list[SkippedFile] = Field(default_factory=list)
    over_cap: list[ChangedModule] = Field(
        default_factory=list, description="Not optimized: over the cap of max_targets."
    )
    cosmetic: list[ChangedModule] = Field(
        default_factory=list,
        description="Not optimized: classes whose lines changed, but only in comments, "
        "docstrings or formatting (a whole file of such edits is a 'cosmetic' skipped file).",
    )
    notes: list[str] = Field(
        default_factory=list, description="What detection could not look at, for the comment."
    )

    def targets(self) -> list[ChangedModule]:
        """The modules to optimize this run."""
        return [module for module in self.modules if module.target is not None]

    def unconfigured(self) -> list[ChangedModule]:
        """Changed modules with no way to build inputs (the comment shows their TOML)."""
        return [module for module in self.modules if module.target is None]
