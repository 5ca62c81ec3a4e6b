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

import math
import platform
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.artifact import read_artifact
from bot.detect.changes import ChangeReport
from bot.event import Event, Mode
from bot.pr.base_config import JudgingConfig
from bot.pr.sources import TargetSource, safe_relative_path
from bot.report import Report, TargetReport
from harness.errors import UserError
from harness.records import Timings, TimingStats

SCHEMA_VERSION = 1
MAX_RESULTS_BYTES = 32 * 1024 * 1024
RESULTS_FILE = "results.json"


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
    shard: list[str] | None = Field(
        default=None,
        max_length=10_000,
        description="The modules (or a manual run's targets) this run measured as one shard of "
        "a matrix (bot.pr.shards); None: all that the event asks for.",
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
    if result is not None:
        numbers |= {f"device_us.{name}": value for name, value in result.device_us.items()}
    for name in Timings.model_fields:
        stats = getattr(row.timings, name)
        if isinstance(stats, TimingStats):
            numbers |= {
                f"timings.{name}.{part}": getattr(stats, part)
                for part in ("median_ms", "iqr_ms", "min_ms")
            }
    return numbers
