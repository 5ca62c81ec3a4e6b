"""Which proposer a run uses, and the LLM team built from the project's settings and flags.

``--llm auto`` (the default) uses the LLM team when an endpoint is configured (OPENAI_API_KEY
or OPENAI_BASE_URL set, or a [tool.kernelpilot.llm] table) and the offline proposer otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import ValidationError

from agents.context import Reference
from agents.llm import make_client
from agents.llm.client import LLMConfig
from agents.loop import SearchConfig
from agents.team import Team, TeamConfig
from harness.config import ProjectConfig, find_pyproject, load_project_config
from harness.errors import UserError
from harness.records import Problem


def project() -> tuple[ProjectConfig, Path | None]:
    pyproject = find_pyproject(Path.cwd())
    return (load_project_config(pyproject) if pyproject else ProjectConfig()), pyproject


def choose_llm(asked: str, project_llm: dict) -> str:
    """offline, openai or scripted, from --llm (auto: an endpoint configured or not)."""
    if asked != "auto":
        return asked
    if project_llm.get("provider") == "scripted":
        return "scripted"
    configured = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
    return "openai" if configured or project_llm else "offline"


def llm_config(provider: str, overrides: dict) -> LLMConfig:
    """[tool.kernelpilot.llm] with the run's flags on top, checked."""
    settings, pyproject = project()
    table = {**settings.llm, "provider": provider, **{k: v for k, v in overrides.items() if v}}
    if provider == "scripted":
        table.setdefault("model", "scripted")  # replies from a file: no model's name to show
    try:
        return LLMConfig.model_validate(table)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "llm"
        raise UserError(
            f"invalid LLM setting: {first['msg']}",
            where=f"{pyproject or 'command line'}: tool.kernelpilot.llm.{key}",
            fix="see the README's LLM section for the keys and values",
        ) from None


def search_config(overrides: dict) -> SearchConfig:
    """[tool.kernelpilot.search] with the run's flags (--budget, --max-time, ...) on top."""
    settings, pyproject = project()
    table = {**settings.search, **{k: v for k, v in overrides.items() if v is not None}}
    try:
        return SearchConfig.model_validate(table)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(part) for part in first["loc"]) or "search"
        raise UserError(
            f"invalid search setting: {first['msg']}",
            where=f"{pyproject or 'command line'}: tool.kernelpilot.search.{key}",
            fix="see the README's search section for the keys and values",
        ) from None


def make_team(config: LLMConfig, problem: Problem) -> Team:
    """The team for one target: the client, and the reference module it works on."""
    reference = Reference(
        source=problem.source_path.read_text(),
        class_name=problem.class_name,
        device=problem.device,
        dtype=problem.dtype,
    )
    return Team(make_client(config), config, reference, TeamConfig())
