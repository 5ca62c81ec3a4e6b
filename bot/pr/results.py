"""The results of one pull-request (or manual) run: what the measuring job hands the
publishing job, as ``results.json`` in an artifact.

The measuring job ran the pull request's code, so to the publishing job this file is untrusted
input: ``load_results`` caps its size, validates it against these models (no unknown field; the
names that go into generated code are identifiers, the paths relative paths inside the
repository, the dtype and device known words), refuses numbers that are not finite or times that
do not give the speedups claimed, and checks that it is about the repository, pull request,
branches, fork and commit of the publishing job's own event. Nothing in it chooses where
publish writes: that comes from the event and the API (``bot.pr.trust``).
"""

from __future__ import annotations

import keyword
import math
import platform
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.artifact import read_artifact
from bot.detect.changes import ChangeReport
from bot.event import Event, Mode
from bot.pr.base_config import JudgingConfig
from bot.report import Report, TargetReport
from harness.capture.freeze import IMPORT_LINE, safe_expression
from harness.capture.records import ArgSpec
from harness.errors import UserError
from harness.records import Problem, Timings, TimingStats

SCHEMA_VERSION = 1
MAX_RESULTS_BYTES = 32 * 1024 * 1024
RESULTS_FILE = "results.json"


class TargetSource(BaseModel):
    """How a target's module and inputs are built, relative to the repository root: what the
    follow-up pull request's test file does to check the kernel against the original."""

    module_path: str
    class_name: str
    inputs_path: str | None = None
    inputs_fn: str | None = None
    input_shapes: list[list[int]] | None = None
    captured_inputs: list[ArgSpec] | None = Field(
        default=None, description="A captured call's arguments: tensors drawn like them."
    )
    input_keywords: list[str] = Field(default_factory=list, max_length=64)
    init_fn: str | None = None
    init_args: list = Field(default_factory=list)
    init_kwargs: dict = Field(default_factory=dict)
    init_captured: bool = Field(
        default=False, description="The constructor's arguments were captured (config objects)."
    )
    init_call: str | None = Field(
        default=None,
        description="Those arguments as an expression (a list, or a dict of keyword ones) over "
        "init_imports' names, where they could be written out; else no follow-up.",
        max_length=4000,
    )
    init_imports: list[str] = Field(default_factory=list, max_length=32)
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    device: Literal["cpu", "cuda"] = "cpu"
    atol: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    rtol: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("class_name", "inputs_fn", "init_fn")
    @classmethod
    def _identifier(cls, name: str | None) -> str | None:
        """These go into the follow-up's Python as names: identifiers, nothing else."""
        if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
            raise ValueError(f"{name!r} is not a Python identifier")
        return name

    @field_validator("input_keywords")
    @classmethod
    def _keywords(cls, names: list[str]) -> list[str]:
        for name in names:
            cls._identifier(name)
        return names

    @model_validator(mode="after")
    def _init_call_safe(self) -> TargetSource:
        """Written into the follow-up's test as code: literals and calls of names imported
        from the repository's own modules, nothing else (``harness.capture.freeze``)."""
        own = PurePosixPath(self.module_path).with_suffix("").parts
        for line in self.init_imports:
            module = line.split()[1] if IMPORT_LINE.match(line) else ""
            # the target's own module, or one of its top-level package: never `from os import`
            within = len(own) > 1 and module.split(".")[0] == own[0]
            if module != ".".join(own) and not within:
                raise ValueError(f"{line!r} is not an import from the target's own package")
        if self.init_call is not None:
            names = {line.split()[-1] for line in self.init_imports}
            if safe_expression(self.init_call, names) is None:
                raise ValueError("init_call is not literals and calls of its imported names")
        return self

    @property
    def constructible(self) -> bool:
        """Whether the follow-up's test can build the module as it was verified."""
        return not self.init_captured or self.init_call is not None

    @field_validator("module_path", "inputs_path")
    @classmethod
    def _inside(cls, path: str | None) -> str | None:
        if path is not None:
            try:
                safe_relative_path(path, "results: sources")
            except UserError as err:
                raise ValueError(err.what) from None
            if not path.endswith(".py"):
                raise ValueError(f"{path!r} is not a .py file")
        return path

    @field_validator("init_args", "init_kwargs")
    @classmethod
    def _finite(cls, values: list | dict) -> list | dict:
        """Written into the follow-up's test as Python literals: JSON values, finite numbers."""
        _check_literal(values)
        return values

    @classmethod
    def of(cls, problem: Problem, root: Path) -> TargetSource:
        """``problem`` with its paths made relative to ``root``: the fields they share are
        ``Problem``'s own, read through this stricter model."""

        def relative(path: Path) -> str:
            return path.resolve().relative_to(root.resolve()).as_posix()

        shared = problem.model_dump(include=set(cls.model_fields) - {"module_path"})
        shared["inputs_path"] = relative(problem.inputs_path) if problem.inputs_path else None
        shared["init_captured"] = problem.init_capture is not None
        return cls(module_path=relative(problem.source_path), **shared)


class Environment(BaseModel):
    """What the kernels were verified with (named in the follow-up's header)."""

    torch: str = ""
    cuda: str | None = None
    python: str = Field(default_factory=platform.python_version)
    kernelpilot: str = ""

    @classmethod
    def here(cls) -> Environment:
        from importlib.metadata import PackageNotFoundError, version

        import torch

        try:
            own = version("kernelpilot")
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            own = "source"
        return cls(torch=torch.__version__, cuda=torch.version.cuda, kernelpilot=own)


class PullResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    mode: Mode
    repository: str
    pull_number: int | None = None
    commit: str = Field(description="The commit measured (a pull request's head).")
    base_ref: str = Field(
        default="",
        description="The base branch (a manual run: its branch) as measure's event named it: "
        "publish checks it against its own event and never writes by it.",
    )
    head_ref: str = Field(default="", description="As measure's event named it (checked).")
    fork: bool = Field(default=False, description="As measure's event said (checked).")
    judged_by: JudgingConfig = Field(
        default_factory=JudgingConfig,
        description="The configuration that judged the run (a pull request's: its base's).",
    )
    changes: ChangeReport | None = None
    report: Report = Field(default_factory=Report)
    sources: dict[str, TargetSource] = Field(
        default_factory=dict, description="By report row target ('path.py:Class')."
    )
    environment: Environment = Field(default_factory=Environment)
    run_url: str = ""
    note: str = Field(default="", description="Why nothing ran, when nothing did.")
    sandbox: Literal["bubblewrap", "off"] = Field(
        default="bubblewrap",
        description="How the pull request's code was isolated: off only where the workflow "
        "opted in (KERNELPILOT_SANDBOX=off), never for a fork; the comment warns of it.",
    )
    test_dir: str | None = Field(
        default=None,
        description="Where the repository keeps its tests (tests/, test/), if it does.",
    )

    def save(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / RESULTS_FILE
        path.write_text(self.model_dump_json(indent=2))
        return path


def load_results(results_dir: Path, event: Event) -> PullResults:
    """Read and check the measuring job's results against the publishing job's own event."""
    path = results_dir / RESULTS_FILE
    where = str(path)
    results = read_artifact(
        path, PullResults, MAX_RESULTS_BYTES, "results", "measuring job",
        "kernelpilot github measure",
    )  # fmt: skip
    _check_matches(results, event, where)
    _check_numbers(results, where)
    return results


def _check_matches(results: PullResults, event: Event, where: str) -> None:
    """The results must be about this very event: a mismatch is a stale or forged artifact."""
    expected: dict[str, object] = {"repository": event.repository, "mode": event.mode}
    if event.pull is not None:
        expected["pull_number"] = event.pull.number
        expected["commit"] = event.pull.head_sha
        expected["base_ref"] = event.pull.base_ref
        expected["head_ref"] = event.pull.head_ref
        expected["fork"] = event.pull.fork
        expected["judged_by.commit"] = event.pull.base_sha
    else:
        expected["pull_number"] = None
        expected["base_ref"] = event.ref
        expected["fork"] = False
        if event.sha:
            expected["commit"] = event.sha
    for name, value in expected.items():
        found = _field(results, name)
        if found != value:
            raise UserError(
                f"results are for {name} {found!r}, this run is for {value!r}",
                where=where,
                fix="publish the artifact of this same workflow run; a mismatch that is not "
                "stale means the measuring job's output was tampered with",
            )
    for target, source in results.sources.items():
        safe_relative_path(source.module_path, f"{where}: sources[{target!r}].module_path")
    if results.test_dir is not None:
        safe_relative_path(results.test_dir, f"{where}: test_dir")


def _field(results: PullResults, dotted: str) -> object:
    value: object = results
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


CLAIM_SLACK = 0.01  # a speedup is the ratio of the times shown, rounded: 1% is plenty


def _check_numbers(results: PullResults, where: str) -> None:
    """Every number shown is finite and not negative, and each speedup is the ratio of the
    times beside it: a claim the table's own numbers contradict is refused."""
    fix = "publish only what `kernelpilot github measure` wrote"
    for index, row in enumerate(results.report.targets):
        here = f"{where}: report.targets[{index}]"
        for name, value in _numbers(row).items():
            if value is not None and (not math.isfinite(value) or value < 0):
                raise UserError(
                    f"{name} is {value!r}, not a finite number of at least 0", where=here, fix=fix
                )
        timings = row.timings
        for speedup, verdict, baseline in (("speedup_vs_eager", row.vs_eager, timings.eager),
                                           ("speedup_vs_compile", row.vs_compile,
                                            timings.compiled)):  # fmt: skip
            if verdict is None:
                continue
            claimed = verdict.speedup
            if baseline is None or timings.candidate is None or not timings.candidate.median_ms:
                raise UserError(
                    f"{speedup} is {claimed} without the times it is the ratio of",
                    where=here,
                    fix=fix,
                )
            ratio = baseline.median_ms / timings.candidate.median_ms
            if abs(claimed - ratio) > CLAIM_SLACK * ratio:
                raise UserError(
                    f"{speedup} is {claimed}, but its times give {ratio:.3g}", where=here, fix=fix
                )
    if not math.isfinite(results.report.review_speedup):
        raise UserError("review_speedup is not finite", where=f"{where}: report",
                        fix="publish only what `kernelpilot github measure` wrote")  # fmt: skip


def _numbers(row: TargetReport) -> dict[str, float | None]:
    """Every number a row shows, by name: its times, speedups, errors and cost."""
    result = row.result
    numbers: dict[str, float | None] = {
        "speedup_vs_eager": row.speedup_vs_eager,
        "speedup_vs_compile": row.speedup_vs_compile,
        "max_abs_error": result.max_abs_error if result else None,
        "rel_error": result.rel_error if result else None,
        "cost_usd": row.cost_usd,
    }
    for name in Timings.model_fields:
        stats = getattr(row.timings, name)
        if isinstance(stats, TimingStats):
            numbers |= {
                f"timings.{name}.{part}": getattr(stats, part)
                for part in ("median_ms", "iqr_ms", "min_ms")
            }
    return numbers


def _check_literal(value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    if isinstance(value, list):
        for item in value:
            _check_literal(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{key!r} is not a string key")
            _check_literal(item)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{value!r} is not a JSON value")


def safe_relative_path(text: str, where: str) -> PurePosixPath:
    """A path inside the repository that kernelpilot may write beside: relative, normalized,
    no ``..``, not under ``.git`` or ``.github``."""
    path = PurePosixPath(text)
    bad = (
        not text
        or path.is_absolute()
        or "\\" in text
        or any(part in ("..", ".", "") for part in text.split("/"))
        or path.parts[0] in (".git", ".github")
        or any(ord(char) < 32 for char in text)
    )
    if bad:
        raise UserError(
            f"refusing the path {text!r}",
            where=where,
            fix="a target must be a .py file inside the repository, outside .git and .github",
        )
    return path
