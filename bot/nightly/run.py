"""The nightly run over what a repository benchmarks: every kernel it ships, and every
configured target (``[[tool.kernelpilot.targets]]``) that ships none.

A shipped kernel is re-verified against its current module and timed against eager and
torch.compile, or reported stale (its class changed since it was verified) with the commit
that changed it. A configured target without a kernel has eager and torch.compile timed, or
is reported missing (its file or class is gone) or failed (it does not load or run), with
what, where and what to do; a target whose kernel is shipped is benchmarked once, through the
kernel (``bot.nightly.measure`` measures and judges each). Each night is one record per
benchmark in the history (``bot.nightly.history``); the regression rule (``bot.nightly.regression``) judges it
against the nights before on the same setup, and a night that looks slower is measured again
in the same run before it is reported. The night's records are written even when some
benchmarks failed.

Two steps, run as two jobs in Actions: ``measure_night`` runs the repository's code and writes
nothing (its NightlyResults are the artifact, ``bot.nightly.results``); ``record_night``
appends the records and plots to a history store and runs no repository code.
``run_nightly`` does both, for ``kernelpilot nightly`` on a local checkout.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from junit_xml import TestCase, TestSuite, to_xml_report_string
from pydantic import BaseModel, Field

from bot.git import checked_out_commit
from bot.nightly.configured import configured_targets
from bot.nightly.history import History, Record, plot_of, slug
from bot.nightly.measure import NightlyRow, Progress, Tonight, kernel_row, night_fields, target_row
from bot.nightly.plot import plot_png
from bot.nightly.results import NightlyResults, capped
from bot.nightly.shipped import find_shipped
from bot.settings import Settings, reader
from harness.config import EvalConfig
from harness.evaluate import Evaluator

__all__ = [
    "NightlyReport",
    "check_checkout",
    "NightlyRow",
    "measure_night",
    "record_night",
    "render_junit",
    "render_table",
    "run_nightly",
]


class Store(Protocol):
    def load(self) -> History: ...

    def append(
        self, records: list[Record], message: str, plots: dict[str, bytes] | None = None
    ) -> str: ...


def check_checkout(repo: Path) -> str:
    """The commit checked out in ``repo``: the night is that commit's, and a shipped kernel is
    judged stale from its module's history since the commit it was verified at."""
    return checked_out_commit(
        repo,
        why="the nightly records each night under the checked-out commit and judges shipped "
        "kernels against the git history of their modules",
    )


class NightlyReport(BaseModel):
    commit: str
    night: str
    rows: list[NightlyRow] = Field(default_factory=list)
    history_problems: list[str] = Field(default_factory=list)
    stored: str = ""


def measure_night(
    repo: Path,
    device: str,
    history: History,
    config: EvalConfig,
    settings: Settings,
    progress: Progress,
    seed: int | None = None,
    run_url: str = "",
    repository: str = "",
) -> NightlyResults:
    """Measure and judge every benchmark of the night against ``history``; writes nothing.
    ``settings``: the project's (its configured targets, the regression rule)."""
    repo = repo.resolve()
    commit = check_checkout(repo)
    night = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    results = NightlyResults(
        repository=repository or repo.name, commit=commit, night=night, run_url=run_url
    )
    kernels = find_shipped(repo)
    shipped = {(kernel.module_path, kernel.class_name) for kernel in kernels}
    targets = [
        t
        for t in configured_targets(repo, settings)
        if (t.module_path, t.class_name) not in shipped
    ]
    progress(f"nightly: {len(kernels)} shipped kernel(s), {len(targets)} configured target(s) "
             f"without one, at {commit[:12]}")  # fmt: skip
    tonight = Tonight(repo=repo, device=device, evaluator=Evaluator(config, seed, progress=progress),
                      rule=settings.nightly, progress=progress, seed=seed,
                      base=night_fields(night, commit, run_url, device),
                      read=reader(settings))  # fmt: skip
    for kernel in kernels:
        results.rows.append(kernel_row(tonight, kernel, history.records.get(kernel.benchmark, [])))
    for target in targets:
        results.rows.append(target_row(tonight, target, history.records.get(target.benchmark, [])))
    for row in results.rows:  # what publish accepts (bot.nightly.results): long logs cut here
        row.reason, row.record.note = capped(row.reason), capped(row.record.note)
    return results


def record_night(results: NightlyResults, store: Store) -> NightlyReport:
    """Append the night's records, and each benchmark's plot, to the history in ``store``."""
    history = store.load()
    report = NightlyReport(commit=results.commit, night=results.night, rows=results.rows)
    report.history_problems = [f"{p.path}:{p.line}: {p.error}" for p in history.problems]
    if report.rows:
        plots = {
            plot_of(row.benchmark): plot_png(
                row.benchmark, [*history.records.get(row.benchmark, []), row.record]
            )
            for row in report.rows
        }
        report.stored = store.append(
            [row.record for row in report.rows],
            f"nightly {results.night} at {results.commit[:12]}",
            plots,
        )
    return report


def run_nightly(
    repo: Path,
    device: str,
    store: Store,
    config: EvalConfig,
    settings: Settings,
    progress: Progress,
    seed: int | None = None,
    run_url: str = "",
) -> NightlyReport:
    """Measure and record in one go (``kernelpilot nightly`` on a local checkout). In Actions
    the two are separate jobs: ``kernelpilot github nightly-measure|nightly-publish``."""
    results = measure_night(repo, device, store.load(), config, settings, progress, seed, run_url)
    return record_night(results, store)


def render_junit(report: NightlyReport) -> str:
    cases = []
    for row in report.rows:
        record = row.record
        timed = record.time_ms if record.has_kernel else record.eager_ms
        case = TestCase(row.benchmark, classname="kernelpilot.nightly",
                        elapsed_sec=(timed or 0) / 1e3,
                        stdout="\n".join(filter(None, [_times(record), row.reason])))  # fmt: skip
        if row.status == "unjudged":
            case.add_skipped_info(row.reason.splitlines()[0] if row.reason else "not judged")
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
    A target without a shipped kernel shows "—" in the kernel column.

    Benchmark names, reasons and history problems come from the repository's files, its
    modules' errors and the measuring job (untrusted, bot.nightly.results): each is shown as
    code (``code``), so no link, image, mention, HTML or emphasis in it is rendered. The text
    stops before GitHub's limit for an issue body."""
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
            f"| {code(row.benchmark, table=True)} | {_status(row.status)} | {kernel} "
            f"| {_ms(record.eager_ms)} | {_ms(record.compile_ms)} | {change} |"
        )
    for row in report.rows:
        if row.reason:
            lines.append(f"\n- {code(row.benchmark)}: {_markdown(row.reason)}")
    if plot_url is not None:
        lines.append("")
        lines += [
            f"![plot {slug(row.benchmark)}]({plot_url(row.benchmark)})" for row in report.rows
        ]
    if report.history_problems:
        lines += ["", "History lines that could not be read (left as they are):"]
        lines += [f"- {code(problem)}" for problem in report.history_problems]
    if not report.rows:
        lines += ["", "No shipped kernel (files starting with `# kernelpilot-verified:`) and no "
                  "configured target (`[[tool.kernelpilot.targets]]`) found."]  # fmt: skip
    return _within(lines, MAX_MARKDOWN)


NO_KERNEL = "—"
MAX_MARKDOWN = 60_000  # GitHub refuses an issue body over 65,536 characters
MAX_SPAN = 400


def code(text: str, table: bool = False) -> str:
    """Untrusted text as one inline code span, on one line and at most MAX_SPAN characters;
    fenced by more backticks than any run inside it; in a table cell, its pipes escaped."""
    flat = " ".join(text.split())
    if not flat:
        return ""
    if len(flat) > MAX_SPAN:
        flat = flat[: MAX_SPAN - 1] + "…"
    if table:  # GFM splits cells at any unescaped pipe, inside code too
        flat = re.sub(r"\\*\|", r"\|", flat)
    fence = "`" * (max(map(len, re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat[0] == "`" or flat[-1] == "`" else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def _status(status: str) -> str:
    return status if re.fullmatch(r"[a-z_]{1,32}", status) else code(status, table=True)


def _markdown(reason: str) -> str:
    """A reason in a list item: a UserError's "where:" and "fix:" lines as nested items."""
    first, *rest = reason.splitlines() or [""]
    nested = [f"  - {code(line)}" for line in rest if line.strip()]
    return "\n".join([code(first), *nested])


def _within(lines: list[str], limit: int) -> str:
    text, used = [], 0
    for line in lines:
        if used + len(line) + 1 > limit:
            text.append("\n… cut here to stay within GitHub's limit: the measuring job's "
                        "artifact (nightly-results.json) has the whole night.")  # fmt: skip
            break
        text.append(line)
        used += len(line) + 1
    return "\n".join(text) + "\n"


def _times(record: Record) -> str:
    if record.status != "ok":
        return ""
    kernel = f"kernel {_ms(record.time_ms)}, " if record.has_kernel else "no shipped kernel: "
    return f"{kernel}eager {_ms(record.eager_ms)}, torch.compile {_ms(record.compile_ms)}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"
