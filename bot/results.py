"""The results of one pull-request (or manual) run: what the measuring job hands the
publishing job, as ``results.json`` in an artifact.

The measuring job ran the pull request's code, so to the publishing job this file is untrusted
input: ``load_results`` caps its size, validates it against these models, and checks that it is
about the repository, pull request and commit of the publishing job's own event, and every path
it names is checked before anything is written (``bot.followup``).
"""

from __future__ import annotations

import platform
from pathlib import Path, PurePosixPath

from pydantic import BaseModel, Field, ValidationError

from bot.changes import ChangeReport
from bot.event import Event, Mode
from bot.report import Report
from harness.errors import UserError
from harness.records import Problem

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
    init_fn: str | None = None
    init_args: list = Field(default_factory=list)
    init_kwargs: dict = Field(default_factory=dict)
    dtype: str = "float32"
    device: str = "cpu"
    atol: float | None = None
    rtol: float | None = None

    @classmethod
    def of(cls, problem: Problem, root: Path) -> TargetSource:
        def relative(path: Path) -> str:
            return path.resolve().relative_to(root.resolve()).as_posix()

        return cls(
            module_path=relative(problem.source_path),
            class_name=problem.class_name,
            inputs_path=relative(problem.inputs_path) if problem.inputs_path else None,
            inputs_fn=problem.inputs_fn,
            input_shapes=problem.input_shapes,
            init_fn=problem.init_fn,
            init_args=list(problem.init_args),
            init_kwargs=dict(problem.init_kwargs),
            dtype=problem.dtype,
            device=problem.device,
            atol=problem.atol,
            rtol=problem.rtol,
        )


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
    schema_version: int = SCHEMA_VERSION
    mode: Mode
    repository: str
    pull_number: int | None = None
    commit: str = Field(description="The commit measured (a pull request's head).")
    base_ref: str = Field(default="", description="The branch a follow-up PR targets.")
    head_ref: str = ""
    fork: bool = False
    changes: ChangeReport | None = None
    report: Report = Field(default_factory=Report)
    sources: dict[str, TargetSource] = Field(
        default_factory=dict, description="By report row target ('path.py:Class')."
    )
    environment: Environment = Field(default_factory=Environment)
    run_url: str = ""
    note: str = Field(default="", description="Why nothing ran, when nothing did.")
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
    if not path.is_file():
        raise UserError(
            "no results to publish",
            where=where,
            fix="download the measuring job's artifact into this folder first",
        )
    if path.stat().st_size > MAX_RESULTS_BYTES:
        raise UserError(
            f"results file is {path.stat().st_size} bytes, over {MAX_RESULTS_BYTES}",
            where=where,
            fix="the measuring job wrote an unexpected file: do not publish it",
        )
    try:
        results = PullResults.model_validate_json(path.read_bytes())
    except ValidationError as err:
        raise UserError(
            f"results file is not valid: {err.errors()[0]['msg']} at "
            f"{'.'.join(str(p) for p in err.errors()[0]['loc'])}",
            where=where,
            fix="publish only what `kernelpilot github measure` of the same version wrote",
        ) from None
    _check_matches(results, event, where)
    return results


def _check_matches(results: PullResults, event: Event, where: str) -> None:
    expected: dict[str, object] = {"repository": event.repository, "mode": event.mode}
    if event.pull is not None:
        expected["pull_number"] = event.pull.number
        expected["commit"] = event.pull.head_sha
    elif event.sha:
        expected["commit"] = event.sha
    for name, value in expected.items():
        if getattr(results, name) != value:
            raise UserError(
                f"results are for {name} {getattr(results, name)!r}, this run is for {value!r}",
                where=where,
                fix="publish the artifact of this same workflow run",
            )
    for target, source in results.sources.items():
        safe_relative_path(source.module_path, f"{where}: sources[{target!r}].module_path")
    if results.test_dir is not None:
        safe_relative_path(results.test_dir, f"{where}: test_dir")


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
