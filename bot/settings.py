"""The project's settings: its pyproject.toml found and read once per run, and each layer's
typed configuration composed from its ``[tool.kernelpilot]`` table.

The command line builds one ``Settings`` (``load_settings``) and passes it down; nothing below
it looks for pyproject.toml again. A pull request's base commit's table is composed here too
(``settings_from_table``, ``bot.pr.base_config``). Sections and who reads them:

- ``device``, ``dtype``, ``targets``, ``eval``: the harness (``harness.config``);
- ``llm``: the LLM client (``agents.llm.client.LLMConfig``), the run's flags on top;
- ``search``: the search (``agents.search.config.SearchConfig``) and the team's knobs
  (``agents.team.TeamConfig``), one table;
- ``nightly``: the regression rule (``bot.nightly.regression.RegressionConfig``).

A key no section knows is an error naming the file and the key; the sandbox can never be set
here (a pull request could switch it off).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from agents.llm.client import LLMConfig
from agents.search.config import SearchConfig
from agents.team import TeamConfig
from bot.nightly.regression import RegressionConfig
from harness.config import (
    CaptureConfig,
    EvalConfig,
    ProjectTargets,
    TableReader,
    TargetConfig,
    kernelpilot_table,
    nearest_project,
    setting_error,
)
from harness.errors import UserError

Checked = TypeVar("Checked", bound=BaseModel)


class LLMTable(LLMConfig):
    """``[tool.kernelpilot.llm]`` as written: LLMConfig's keys and checks, but a scripted
    provider's ``script`` may still come from the command line (``Settings.llm_config``)."""

    @model_validator(mode="after")
    def _script_for_scripted(self) -> LLMTable:
        return self


class SearchTable(SearchConfig, TeamConfig):
    """``[tool.kernelpilot.search]``: how the tree grows and how the roles are asked."""

    model_config = ConfigDict(extra="forbid")


class ProjectTable(BaseModel):
    """The ``[tool.kernelpilot]`` table, each section checked by the model of its layer."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("capture", mode="before")
    @classmethod
    def _command_alone(cls, value):
        """``capture = "python train.py"``: the command, the rest as default."""
        return {"command": value} if isinstance(value, str) else value

    device: str = Field(default="auto", description="'auto', 'cpu' or 'cuda'.")
    dtype: str = Field(default="float32", description="float32, float16 or bfloat16.")
    targets: list[TargetConfig] = Field(default_factory=list, description="Modules to optimize.")
    capture: CaptureConfig = Field(
        default_factory=CaptureConfig,
        description="How changed modules with no configured target are captured.",
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Verification and timing.")
    llm: LLMTable = Field(default_factory=LLMTable, description="The LLM team's endpoint.")
    search: SearchTable = Field(default_factory=SearchTable, description="Search and team.")
    nightly: RegressionConfig = Field(
        default_factory=RegressionConfig, description="The nightly's regression thresholds."
    )


class Settings(BaseModel):
    """One project's settings for one run, typed for the layer that reads each (defaults:
    no project)."""

    model_config = ConfigDict(extra="forbid")

    pyproject: Path | None = Field(
        default=None, description="The file read; None: no project here (the defaults)."
    )
    device: str = Field(default="auto", description="'auto', 'cpu' or 'cuda'.")
    dtype: str = Field(default="float32", description="float32, float16 or bfloat16.")
    targets: list[TargetConfig] = Field(default_factory=list, description="Modules to optimize.")
    capture: CaptureConfig = Field(
        default_factory=CaptureConfig,
        description="How changed modules with no configured target are captured.",
    )
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Verification and timing.")
    llm: LLMTable = Field(
        default_factory=LLMTable,
        description="[tool.kernelpilot.llm] as written; ``llm_config`` puts the flags on top.",
    )
    search: SearchConfig = Field(default_factory=SearchConfig, description="The search.")
    team: TeamConfig = Field(default_factory=TeamConfig, description="How the roles are asked.")
    nightly: RegressionConfig = Field(
        default_factory=RegressionConfig, description="The nightly's regression thresholds."
    )

    @property
    def where(self) -> str:
        return str(self.pyproject or "command line")

    def project_targets(self) -> ProjectTargets | None:
        """What the harness reads of the project (None without one)."""
        if self.pyproject is None:
            return None
        return ProjectTargets(pyproject=self.pyproject, dtype=self.dtype, targets=self.targets)

    def choose_llm(self, asked: str) -> str:
        """offline, openai or scripted, from --llm (auto: an endpoint configured or not)."""
        if asked != "auto":
            return asked
        if self.llm.provider == "scripted":
            return "scripted"
        configured = os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL")
        return "openai" if configured or self.llm.model_fields_set else "offline"

    def llm_config(self, provider: str, flags: dict) -> LLMConfig:
        """[tool.kernelpilot.llm] with the run's flags (the set ones) on top, checked."""
        table = self.llm.model_dump(exclude_unset=True)
        table.update({"provider": provider, **{k: v for k, v in flags.items() if v}})
        if provider == "scripted":
            table.setdefault("model", "scripted")  # replies from a file: no model's name to show
        return _checked(LLMConfig, table, self.where, "tool.kernelpilot.llm")

    def search_config(self, flags: dict) -> SearchConfig:
        """[tool.kernelpilot.search] with the run's flags (--budget, --max-time, ...) on top."""
        table = {**self.search.model_dump(exclude_unset=True)}
        table.update({k: v for k, v in flags.items() if v is not None})
        return _checked(SearchConfig, table, self.where, "tool.kernelpilot.search")


def settings_from_table(table: dict, where: str, pyproject: Path | None = None) -> Settings:
    """A ``[tool.kernelpilot]`` table (from a file, or a file at a commit) as the checked
    settings; ``where`` names it in errors."""
    if "sandbox" in table.get("eval", {}):
        raise UserError(
            "the sandbox cannot be set in pyproject.toml (a pull request could switch it off)",
            where=f"{where}: tool.kernelpilot.eval.sandbox",
            fix="remove the key; pass --sandbox off (or KERNELPILOT_SANDBOX=off) for trusted "
            "code only",
        )
    checked = _checked(ProjectTable, table, where, "tool.kernelpilot")
    return Settings(
        pyproject=pyproject,
        device=checked.device,
        dtype=checked.dtype,
        targets=checked.targets,
        capture=checked.capture,
        eval=checked.eval,
        llm=checked.llm,
        search=SearchConfig(**_part(checked.search, SearchConfig)),
        team=TeamConfig(**_part(checked.search, TeamConfig)),
        nightly=checked.nightly,
    )


def _part(table: BaseModel, model: type[BaseModel]) -> dict:
    """The keys of ``model`` set in ``table`` (the others keep their defaults, unset)."""
    return {
        name: getattr(table, name) for name in model.model_fields if name in table.model_fields_set
    }


class ProjectFiles:
    """The pyproject.toml files of one run, each read and checked once: ``load`` finds the
    run's own, ``read`` is the harness's ``TableReader`` (a target's nearest project).
    ``known``: settings already read, whose file is not read again."""

    def __init__(self, known: Settings | None = None) -> None:
        self._tables: dict[Path, dict | None] = {}
        if known is not None and known.pyproject is not None:
            self._tables[known.pyproject.absolute()] = _table_of(known)

    def read(self, pyproject: Path) -> dict | None:
        """The ``[tool.kernelpilot]`` table of ``pyproject``, checked whole the first time."""
        pyproject = pyproject.absolute()
        if pyproject not in self._tables:
            table = kernelpilot_table(pyproject)
            if table is not None:
                settings_from_table(table, str(pyproject), pyproject)
            self._tables[pyproject] = table
        return self._tables[pyproject]

    def load(self, start: Path) -> Settings:
        """The settings of the nearest project at or above ``start`` (defaults without one)."""
        found = nearest_project(start.absolute(), self.read)
        if found is None:
            return Settings()
        pyproject, table = found
        return settings_from_table(table, str(pyproject), pyproject)


def load_settings(start: Path | None = None, files: ProjectFiles | None = None) -> Settings:
    """The run's settings: the nearest project at or above ``start`` (default: here)."""
    return (files or ProjectFiles()).load(start or Path.cwd())


def reader(settings: Settings) -> TableReader:
    """A reader of the projects' tables (a target's nearest) that takes the run's own
    pyproject.toml from ``settings`` instead of reading it again."""
    return ProjectFiles(settings).read


def _table_of(settings: Settings) -> dict:
    """What the harness reads of the run's own table (its targets and dtype)."""
    return {"dtype": settings.dtype,
            "targets": [t.model_dump(exclude_unset=True) for t in settings.targets]}  # fmt: skip


def _checked(model: type[Checked], table: dict, where: str, prefix: str) -> Checked:
    try:
        return model.model_validate(table)
    except ValidationError as err:
        raise setting_error(err, where, prefix) from None
