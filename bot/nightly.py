"""The nightly run over the kernels a repository ships: is each still right for its module, and
has it got slower?

For each shipped kernel (``bot.shipped``): a stale one (its class changed since it was
verified, or is gone) is reported with the module and the commit that changed it, and not
measured; the others are verified in full against their current module and timed against
eager and torch.compile. Each night is one record in the history (``bot.history``); the
regression rule (``bot.regression``) judges it against the nights before on the same setup,
and a night that looks slower is measured again in the same run before it is reported. The
night's records are written even when some benchmarks failed.
"""

from __future__ import annotations

import datetime
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from junit_xml import TestCase, TestSuite, to_xml_report_string
from pydantic import BaseModel, Field

from bot.history import History, Record, plot_of
from bot.plot import plot_png
from bot.regression import Night, RegressionConfig, Verdict, assess
from bot.shipped import ShippedKernel, find_shipped, head_commit, staleness
from harness.config import EvalConfig
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.problem import problem_from_target
from harness.records import Candidate, EvalResult
from harness.worker import device_name

Progress = Callable[[str], None]


class Store(Protocol):
    def load(self) -> History: ...

    def append(
        self, records: list[Record], message: str, plots: dict[str, bytes] | None = None
    ) -> str: ...


class NightlyRow(BaseModel):
    benchmark: str
    status: str = Field(description="ok, stale, failed, or the regression level.")
    reason: str = ""
    record: Record
    verdict: Verdict | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("stale", "failed", "alert", "fail")


class NightlyReport(BaseModel):
    commit: str
    night: str
    rows: list[NightlyRow] = Field(default_factory=list)
    history_problems: list[str] = Field(default_factory=list)
    stored: str = ""


def run_nightly(
    repo: Path,
    device: str,
    store: Store,
    config: EvalConfig,
    rule: RegressionConfig,
    progress: Progress,
    seed: int | None = None,
    run_url: str = "",
) -> NightlyReport:
    repo = repo.resolve()
    commit = head_commit(repo)
    night = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    history = store.load()
    report = NightlyReport(commit=commit, night=night)
    report.history_problems = [f"{p.path}:{p.line}: {p.error}" for p in history.problems]
    kernels = find_shipped(repo)
    progress(f"nightly: {len(kernels)} shipped kernel(s) at {commit[:12]}")
    evaluator = Evaluator(config, seed, progress=progress)
    for kernel in kernels:
        row = _benchmark(repo, kernel, device, evaluator, commit, night, run_url, progress)
        if row.record.status == "ok":
            row = _judge(row, history.records.get(kernel.benchmark, []), rule, kernel, evaluator, repo, device)
        report.rows.append(row)
    if report.rows:
        plots = {
            plot_of(row.benchmark): plot_png(
                row.benchmark, [*history.records.get(row.benchmark, []), row.record]
            )
            for row in report.rows
        }
        report.stored = store.append(
            [row.record for row in report.rows], f"nightly {night} at {commit[:12]}", plots
        )
    return report


def _benchmark(
    repo: Path, kernel: ShippedKernel, device: str, evaluator: Evaluator, commit: str,
    night: str, run_url: str, progress: Progress,
) -> NightlyRow:  # fmt: skip
    base: dict[str, Any] = dict(benchmark=kernel.benchmark, night=night, commit=commit,
                                run_url=run_url, device=device, **_setup(device))  # fmt: skip
    stale = staleness(repo, kernel)
    if stale.stale:
        reason = f"stale: {stale.reason}" + (f" (commit {stale.commit[:12]})" if stale.commit else "")
        progress(f"{kernel.path}: {reason}")
        record = Record(**base, status="stale", note=reason)
        return NightlyRow(benchmark=kernel.benchmark, status="stale", reason=reason, record=record)
    try:
        result = _measure(repo, kernel, device, evaluator)
    except UserError as err:
        record = Record(**base, status="failed", note=err.render())
        return NightlyRow(benchmark=kernel.benchmark, status="failed", reason=err.render(), record=record)
    record = _record(base, result)
    if result.status.value != "ok":
        reason = f"no longer verified: {result.status.value}: {result.reason}"
        record.note = reason
        return NightlyRow(benchmark=kernel.benchmark, status="failed", reason=reason, record=record)
    return NightlyRow(benchmark=kernel.benchmark, status="ok", record=record)


def _measure(repo: Path, kernel: ShippedKernel, device: str, evaluator: Evaluator) -> EvalResult:
    problem = problem_from_target(f"{repo / kernel.module_path}:{kernel.class_name}", device, None)
    source = (repo / kernel.path).read_text(encoding="utf-8")
    return evaluator.evaluate(problem, Candidate(source=source, origin="shipped"))


def _setup(device: str) -> dict[str, Any]:
    """The machine setup every record of the night names (stale ones too)."""
    import torch

    return {"device_name": device_name(device), "driver": _driver(), "torch": torch.__version__,
            "cuda": torch.version.cuda}  # fmt: skip


def _record(base: dict[str, Any], result: EvalResult) -> Record:
    return Record(
        **{**base, "device_name": result.device_name or base["device_name"]},
        status=result.status.value,
        time_ms=result.candidate.median_ms if result.candidate else None,
        iqr_ms=result.candidate.iqr_ms if result.candidate else 0.0,
        eager_ms=result.eager.median_ms if result.eager else None,
        compile_ms=result.compiled.median_ms if result.compiled else None,
    )


def _judge(
    row: NightlyRow, earlier: list[Record], rule: RegressionConfig, kernel: ShippedKernel,
    evaluator: Evaluator, repo: Path, device: str,
) -> NightlyRow:  # fmt: skip
    nights = [_night(r) for r in earlier if r.status == "ok" and r.time_ms is not None]
    verdict = assess([*nights, _night(row.record)], rule)
    if verdict.suspect:  # measured again before anything is reported
        again = _measure(repo, kernel, device, evaluator)
        if again.status.value == "ok" and again.candidate is not None:
            row.record.remeasured_ms.append(again.candidate.median_ms)
        verdict = assess([*nights, _night(row.record)], rule)
    row.verdict = verdict
    if verdict.level in ("alert", "fail"):
        row.status, row.reason = verdict.level, verdict.reason
    return row


def _night(record: Record) -> Night:
    assert record.time_ms is not None
    return Night(setup=record.setup, times_ms=[record.time_ms, *record.remeasured_ms],
                 iqr_ms=record.iqr_ms)  # fmt: skip


def _driver() -> str:
    import torch

    if not torch.cuda.is_available():
        return ""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def render_junit(report: NightlyReport) -> str:
    cases = []
    for row in report.rows:
        case = TestCase(row.benchmark, classname="kernelpilot.nightly",
                        elapsed_sec=(row.record.time_ms or 0) / 1e3, stdout=row.reason)  # fmt: skip
        if row.failed:
            case.add_failure_info(row.reason or row.status)
        cases.append(case)
    return to_xml_report_string([TestSuite("kernelpilot-nightly", cases)])


def render_table(report: NightlyReport, plot_url: Callable[[str], str] | None = None) -> str:
    """The night as markdown; ``plot_url(benchmark)``: where its plot can be seen, if anywhere."""
    lines = [
        f"## kernelpilot nightly, {report.night} at `{report.commit[:12]}`",
        "",
        "| benchmark | status | kernel | eager | torch.compile | vs baseline |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.rows:
        record = row.record
        change = f"{row.verdict.change:+.1%}" if row.verdict and row.verdict.change is not None else "-"
        lines.append(
            f"| `{row.benchmark}` | {row.status} | {_ms(record.time_ms)} | {_ms(record.eager_ms)} "
            f"| {_ms(record.compile_ms)} | {change} |"
        )
    for row in report.rows:
        if row.reason:
            lines.append(f"\n- `{row.benchmark}`: {row.reason}")
    if plot_url is not None:
        lines.append("")
        lines += [f"![{row.benchmark}]({plot_url(row.benchmark)})" for row in report.rows]
    if report.history_problems:
        lines += ["", "History lines that could not be read (left as they are):"]
        lines += [f"- {problem}" for problem in report.history_problems]
    if not report.rows:
        lines += ["", "No shipped kernel found (files starting with `# kernelpilot-verified:`)."]
    return "\n".join(lines) + "\n"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"
