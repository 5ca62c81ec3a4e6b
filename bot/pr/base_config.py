"""Which configuration judges a pull request: its base commit's, never its head's.

The author of a pull request controls its head, ``pyproject.toml`` included. Read there,
``[tool.kernelpilot.eval]`` would let the pull request choose how hard it is checked
(``shape_variants = 0``, ``compile_baseline = false``, ``review_speedup = 1000``), a target's
``atol``/``rtol``/``dtype`` how close its kernel must come, and ``[tool.kernelpilot.llm]``
where the LLM key is sent. So, for a pull request:

- the eval settings are the base commit's, read from git's objects (data, not code); each
  setting the head changes is listed as refused, and the comment names them;
- a target the base configures keeps the base's dtype, atol and rtol; a target the pull request
  adds may set its tolerance no looser than its dtype's default (a looser one is refused);
- a head whose ``[tool.kernelpilot.llm]`` differs from the base's is not run at all.

The pull request may still add targets: which modules to optimize is its business, how strictly
they are judged is not.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

from bot.git import file_at
from bot.settings import ProjectFiles, Settings, settings_from_table
from harness.config import CaptureConfig, EvalConfig, nearest_project
from harness.errors import UserError
from harness.files import decode_user_text
from harness.judge.tolerance import tolerance_for
from harness.records import Problem

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT_PYPROJECT = "pyproject.toml"


class JudgingConfig(BaseModel):
    """The configuration a run was judged by, as the comment names it."""

    commit: str | None = Field(
        default=None,
        description="The base commit the settings were read at; None: the checkout's own "
        "(a manual or local run).",
    )
    pyproject: str | None = Field(
        default=None,
        description="The pyproject.toml read, relative to the repository root; None: none "
        "with [tool.kernelpilot] (the defaults).",
    )
    refused: list[str] = Field(
        default_factory=list, description="Settings the pull request changed that were not used."
    )


@dataclass
class BaseSettings:
    """The base commit's settings for one pull request, and what was refused so far."""

    repo: Path
    base_sha: str
    eval: EvalConfig
    judged: JudgingConfig
    capture: CaptureConfig = field(default_factory=CaptureConfig)  # what runs to find targets
    refusal: str = ""  # why the pull request is not run at all, or ""
    _projects: dict[str, Settings | None] = field(default_factory=dict)
    _head_files: ProjectFiles = field(default_factory=ProjectFiles)  # the checkout's, read once

    def project(self, pyproject: str) -> Settings | None:
        """The base commit's ``[tool.kernelpilot]`` of ``pyproject`` (relative), if any."""
        if pyproject not in self._projects:
            table = kernelpilot_table(self.repo, self.base_sha, pyproject)
            where = f"{pyproject} at the base commit {self.base_sha[:12]}"
            self._projects[pyproject] = None if table is None else settings_from_table(table, where)
        return self._projects[pyproject]


def base_settings(repo: Path, base_sha: str, head_sha: str) -> BaseSettings:
    """The root pyproject.toml's settings at ``base_sha``, and what ``head_sha`` changes."""
    repo = repo.resolve()
    base_table = kernelpilot_table(repo, base_sha, ROOT_PYPROJECT)
    head_table = kernelpilot_table(repo, head_sha, ROOT_PYPROJECT)
    base = settings_from_table(
        base_table or {}, f"{ROOT_PYPROJECT} at the base commit {base_sha[:12]}"
    )
    head = settings_from_table(head_table or {}, f"{ROOT_PYPROJECT} at the head {head_sha[:12]}")
    judged = JudgingConfig(
        commit=base_sha, pyproject=ROOT_PYPROJECT if base_table is not None else None
    )
    settings = BaseSettings(repo, base_sha, base.eval, judged, base.capture)
    settings._projects[ROOT_PYPROJECT] = base if base_table is not None else None
    base_eval, head_eval = base.eval.model_dump(), head.eval.model_dump()
    for key, value in head_eval.items():
        if value != base_eval[key]:
            judged.refused.append(
                f"eval.{key} = {_toml(value)} (the base commit has {_toml(base_eval[key])})"
            )
    base_capture, head_capture = base.capture.model_dump(), head.capture.model_dump()
    for key, value in head_capture.items():  # the command, its time limit: the base's
        if value != base_capture[key]:
            judged.refused.append(
                f"capture.{key} = {_toml(value)} (the base commit has {_toml(base_capture[key])})"
            )
    if (base_table or {}).get("llm", {}) != (head_table or {}).get("llm", {}):
        settings.refusal = (
            "This pull request changes [tool.kernelpilot.llm]: kernelpilot does not run a pull "
            "request whose head says where the LLM key goes. Change it on the base branch first "
            "(a pull request of its own, merged), then push again."
        )
    return settings


def hold_to_base(problem: Problem, settings: BaseSettings, dtype_flag: str | None) -> Problem:
    """``problem`` (resolved from the head's checkout) with the base's dtype and tolerances
    where the base configures its target, and no tolerance looser than the dtype's default
    where it does not; each change is added to ``settings.judged.refused``."""
    relative, entry, project = _base_entry(problem, settings)
    name = f"{relative or '?'}: {problem.class_name}"
    if entry is not None and project is not None:
        want = {"dtype": entry.dtype or dtype_flag or project.dtype, "atol": entry.atol,
                "rtol": entry.rtol}  # fmt: skip
        why = "the base commit has {}"
    else:
        default = tolerance_for(problem.dtype)
        want = {
            "dtype": problem.dtype,
            "atol": None if (problem.atol or 0) > default.atol else problem.atol,
            "rtol": None if (problem.rtol or 0) > default.rtol else problem.rtol,
        }
        why = f"looser than {problem.dtype}'s default; the default is used"
    changes = {key: value for key, value in want.items() if getattr(problem, key) != value}
    for key, value in changes.items():
        settings.judged.refused.append(
            f"targets {name}: {key} = {_toml(getattr(problem, key))} ({why.format(_toml(value))})"
        )
    return problem.model_copy(update=changes) if changes else problem


def _base_entry(problem: Problem, settings: BaseSettings):
    """The pyproject.toml (relative) that configures ``problem`` in the head's checkout, and
    that file's entry for it and its settings at the base commit (None where there are none)."""
    found = nearest_project(problem.source_path.parent, settings._head_files.read)
    if found is None or not found[0].resolve().is_relative_to(settings.repo):
        return None, None, None
    pyproject = found[0]
    relative = pyproject.resolve().relative_to(settings.repo).as_posix()
    project = settings.project(relative)
    if project is None:
        return relative, None, None
    folder = pyproject.resolve().parent
    for entry in project.targets:
        file, _, class_name = entry.module.partition(":")
        same_file = (folder / file).resolve() == problem.source_path.resolve()
        if same_file and class_name == problem.class_name:
            return relative, entry, project
    return relative, None, project


def review_speedup(raw: bytes | None, where: str) -> float:
    """``eval.review_speedup`` of a pyproject.toml's text (the default without one)."""
    table = None if raw is None else _parse(raw, where).get("tool", {}).get("kernelpilot")
    return settings_from_table(table if isinstance(table, dict) else {}, where).eval.review_speedup


def kernelpilot_table(repo: Path, commit: str, pyproject: str) -> dict | None:
    """The ``[tool.kernelpilot]`` table of ``pyproject`` at ``commit``; None without one."""
    raw = file_at(repo, commit, pyproject)
    if raw is None:
        return None
    found = _parse(raw, f"{pyproject} at commit {commit[:12]}").get("tool", {}).get("kernelpilot")
    return found if isinstance(found, dict) else None


def _parse(raw: bytes, where: str) -> dict:
    text = decode_user_text(raw, where)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(f"not valid TOML: {err}", where=where, fix="fix the TOML") from None


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return "none" if value is None else str(value)
