"""The nightly run over what a repository benchmarks: every kernel it ships, and every
configured target (``[[tool.kernelpilot.targets]]``) that ships none.

A shipped kernel is re-verified against its current module and timed against eager and
torch.compile, or reported stale (its class changed since it was verified) with the commit
that changed it. A configured target without a kernel has eager and torch.compile timed, or
is reported missing (its file or class is gone) or failed (it does not load or run), with
what, where and what to do; a target whose kernel is shipped is benchmarked once, through the
kernel (``bot.nightly_measure`` measures and judges each). Each night is one record per
benchmark in the history (``bot.history``); the regression rule (``bot.regression``) judges it
against the nights before on the same setup, and a night that looks slower is measured again
in the same run before it is reported. The night's records are written even when some
benchmarks failed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from junit_xml import TestCase, TestSuite, to_xml_report_string
from pydantic import BaseModel, Field

from bot.configured import configured_targets
from bot.history import History, Record, plot_of
from bot.nightly_measure import NightlyRow, Progress, Tonight, kernel_row, night_fields, target_row
from bot.plot import plot_png
from bot.regression import RegressionConfig
from bot.shipped import find_shipped, head_commit
from harness.config import EvalConfig
from harness.evaluate import Evaluator

__all__ = ["NightlyReport", "NightlyRow", "render_junit", "render_table", "run_nightly"]


class Store(Protocol):
    def load(self) -> History: ...

    def append(
        self, records: list[Record], message: str, plots: dict[str, bytes] | None = None
    ) -> str: ...


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
    shipped = {(kernel.module_path, kernel.class_name) for kernel in kernels}
    targets = [t for t in configured_targets(repo) if (t.module_path, t.class_name) not in shipped]
    progress(f"nightly: {len(kernels)} shipped kernel(s), {len(targets)} configured target(s) "
             f"without one, at {commit[:12]}")  # fmt: skip
    tonight = Tonight(repo=repo, device=device, evaluator=Evaluator(config, seed, progress=progress),
                      rule=rule, progress=progress, seed=seed,
                      base=night_fields(night, commit, run_url, device))  # fmt: skip
    for kernel in kernels:
        report.rows.append(kernel_row(tonight, kernel, history.records.get(kernel.benchmark, [])))
    for target in targets:
        report.rows.append(target_row(tonight, target, history.records.get(target.benchmark, [])))
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


def render_junit(report: NightlyReport) -> str:
    cases = []
    for row in report.rows:
        record = row.record
        timed = record.time_ms if record.has_kernel else record.eager_ms
        case = TestCase(row.benchmark, classname="kernelpilot.nightly",
                        elapsed_sec=(timed or 0) / 1e3,
                        stdout="\n".join(filter(None, [_times(record), row.reason])))  # fmt: skip
        if row.failed:
            case.add_failure_info(
                f"{row.status}: {(row.reason or row.status).splitlines()[0]}",
                row.reason,
                failure_type=row.status,
            )
        cases.append(case)
    return to_xml_report_string([TestSuite("kernelpilot-nightly", cases)])


def render_table(report: NightlyReport, plot_url: Callable[[str], str] | None = None) -> str:
    """The night as markdown; ``plot_url(benchmark)``: where its plot can be seen, if anywhere.
    A target without a shipped kernel shows "—" in the kernel column."""
    lines = [
        f"## kernelpilot nightly, {report.night} at `{report.commit[:12]}`",
        "",
        "| benchmark | status | kernel | eager | torch.compile | vs baseline |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.rows:
        record = row.record
        change = (
            f"{row.verdict.change:+.1%}" if row.verdict and row.verdict.change is not None else "-"
        )
        kernel = _ms(record.time_ms) if record.has_kernel else NO_KERNEL
        lines.append(
            f"| `{row.benchmark}` | {row.status} | {kernel} | {_ms(record.eager_ms)} "
            f"| {_ms(record.compile_ms)} | {change} |"
        )
    for row in report.rows:
        if row.reason:
            lines.append(f"\n- `{row.benchmark}`: {_markdown(row.reason)}")
    if plot_url is not None:
        lines.append("")
        lines += [f"![{row.benchmark}]({plot_url(row.benchmark)})" for row in report.rows]
    if report.history_problems:
        lines += ["", "History lines that could not be read (left as they are):"]
        lines += [f"- {problem}" for problem in report.history_problems]
    if not report.rows:
        lines += ["", "No shipped kernel (files starting with `# kernelpilot-verified:`) and no "
                  "configured target (`[[tool.kernelpilot.targets]]`) found."]  # fmt: skip
    return "\n".join(lines) + "\n"


NO_KERNEL = "—"


def _markdown(reason: str) -> str:
    """A reason in a list item: a UserError's "where:" and "fix:" lines as nested items."""
    first, *rest = reason.splitlines()
    nested = [
        f"  - {line.strip()}" if line.strip().startswith(("where:", "fix:")) else f"  {line}"
        for line in rest
    ]
    return "\n".join([first, *nested])


def _times(record: Record) -> str:
    if record.status != "ok":
        return ""
    kernel = f"kernel {_ms(record.time_ms)}, " if record.has_kernel else "no shipped kernel: "
    return f"{kernel}eager {_ms(record.eager_ms)}, torch.compile {_ms(record.compile_ms)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"
