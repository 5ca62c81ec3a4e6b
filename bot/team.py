"""Which proposer a run uses, and the LLM team built from the project's settings and flags.

``--llm auto`` (the default) uses the LLM team when an endpoint is configured (OPENAI_API_KEY
or OPENAI_BASE_URL set, or a [tool.kernelpilot.llm] table) and the offline proposer otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from agents.context import Reference
from agents.llm import make_client
from agents.llm.client import LLMConfig, Progress
from agents.loop import SearchConfig
from agents.team import Team, TeamConfig
from harness.config import ProjectConfig, find_pyproject, load_project_config
from harness.errors import UserError
from harness.files import read_user_text
from harness.records import Problem

Checked = TypeVar("Checked", bound=BaseModel)


def project(start: Path | None = None) -> tuple[ProjectConfig, Path | None]:
    """The nearest project's settings, looked for from ``start`` (default: here)."""
    pyproject = find_pyproject(start or Path.cwd())
    return (load_project_config(pyproject) if pyproject else ProjectConfig()), pyproject


def choose_llm(asked: str, project_llm: dict) -> str:
    """offline, openai or scripted, from --llm (auto: an endpoint configured or not)."""
    if asked != "auto":
        return asked
    if project_llm.get("provider") == "scripted":
        return "scripted"
    configured = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    return "openai" if configured or project_llm else "offline"


def llm_config(provider: str, overrides: dict, start: Path | None = None) -> LLMConfig:
    """[tool.kernelpilot.llm] with the run's flags on top, checked."""
    settings, pyproject = project(start)
    table = {**settings.llm, "provider": provider, **{k: v for k, v in overrides.items() if v}}
    if provider == "scripted":
        table.setdefault("model", "scripted")  # replies from a file: no model's name to show
    return _checked(LLMConfig, table, "llm", pyproject)


def search_config(overrides: dict, start: Path | None = None) -> SearchConfig:
    """[tool.kernelpilot.search] with the run's flags (--budget, --max-time, ...) on top."""
    settings, pyproject = project(start)
    table = {**settings.search, **{k: v for k, v in overrides.items() if v is not None}}
    return _checked(SearchConfig, table, "search", pyproject)


def nightly_config(start: Path | None = None):
    """[tool.kernelpilot.nightly], checked."""
    from bot.nightly.regression import RegressionConfig

    settings, pyproject = project(start)
    return _checked(RegressionConfig, settings.nightly, "nightly", pyproject)


def _checked(model: type[Checked], table: dict, section: str, pyproject: Path | None) -> Checked:
    """``table`` as a ``model``; a bad setting is a UserError naming its key."""
    try:
        return model.model_validate(table)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or section
        raise UserError(
            f"invalid {section} setting: {first['msg']}",
            where=f"{pyproject or 'command line'}: tool.kernelpilot.{section}.{key}",
            fix=f"see the README's configuration section for the [tool.kernelpilot.{section}] keys",
        ) from None


def make_team(config: LLMConfig, problem: Problem, progress: Progress | None = None) -> Team:
    """The team for one target: the client, and the reference module it works on.
    ``progress``: where the client reports each attempt, wait and failure of its calls."""
    reference = Reference(
        source=read_user_text(problem.source_path, "Python file"),
        class_name=problem.class_name,
        device=problem.device,
        dtype=problem.dtype,
    )
    return Team(make_client(config, progress), config, reference, TeamConfig())
