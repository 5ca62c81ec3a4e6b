"""Rendering the report record: terminal table, markdown, JUnit XML, and the files.

The table's columns are defined once (``COLUMNS``): the terminal table, the markdown and
JUnit (each case's output) walk the same list, and report.json is the record itself, so a
measured value shown in a new column is one line here. The markdown (report.md) puts every string of the report through
``bot.markdown``, as the pull-request comment does: targets, reasons and checks may come from
a pull request's code."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from junit_xml import TestCase, TestSuite, to_xml_report_string

from bot import markdown as md
from bot.render_spend import spend_markdown, spend_terminal
from bot.report import ERROR_STATUSES, Report, TargetReport, TargetStatus
from harness.records import TimingStats, Verdict


class Column(NamedTuple):
    """One column of a report table: its header and its cell for a row. ``text`` cells are
    untrusted text (code spans in markdown, at most that many characters), the others
    numbers kernelpilot formats itself."""

    header: str
    cell: Callable[[TargetReport], str]
    text: int | None = None


def _ms(stats: TimingStats | None) -> str:
    return "-" if stats is None else f"{stats.median_ms:.3f}"


def beyond_noise(verdict: Verdict) -> str:
    """What a ratio means, as a reader takes it: faster (nothing to add), slower, or within
    the noise either way."""
    return "" if verdict.faster else " slower" if verdict.slower else " (within noise)"


def _speedup(verdict: Verdict | None, review: bool) -> str:
    if verdict is None:
        return "-"
    if review:
        return f"{verdict.speedup:.2f}x ⚠ review"
    return f"{verdict.speedup:.2f}x{beyond_noise(verdict)}"


# Device time "differs" from call time beyond this share of the call (issue 27, goal 4).
DEVICE_TIME_GAP = 0.10


def device_time_line(row: TargetReport) -> str | None:
    """cuda: one profiled call's device time (its kernels summed) beside the median call time,
    for kernelpilot and each baseline, where any of them differ by more than DEVICE_TIME_GAP;
    and which of the two the verdicts were judged on."""
    device_us = row.result.device_us if row.result else {}
    calls = {
        "kernelpilot": row.timings.candidate,
        "eager": row.timings.eager,
        "torch.compile": row.timings.compiled,
    }
    pairs = [
        (name, device_us[name], stats.median_ms * 1e3)
        for name, stats in calls.items()
        if name in device_us and stats is not None and stats.median_ms > 0
    ]
    if all(abs(device / call - 1) <= DEVICE_TIME_GAP for _, device, call in pairs):
        return None  # no pair, or none that differs
    shown = ", ".join(f"{name} {_us(device)} (call {_us(call)})" for name, device, call in pairs)
    return (
        f"Device time of one profiled call, its kernels summed: {shown}. The speedups are "
        "judged on call time: the harness's timer, the median call, launches and host work "
        "included."
    )


def _us(microseconds: float) -> str:
    return f"{microseconds:,.1f} µs" if microseconds < 100 else f"{microseconds:,.0f} µs"


def _error(row: TargetReport) -> str:
    error = row.result.max_abs_error if row.result else None
    return "-" if error is None else f"{error:.2e}"


COLUMNS = [
    Column("target", lambda row: row.target, text=200),
    Column("status", lambda row: row.status.value, text=40),
    Column("eager ms", lambda row: _ms(row.timings.eager)),
    Column("compile ms", lambda row: _ms(row.timings.compiled)),
    Column("kernel ms", lambda row: _ms(row.timings.candidate)),
    Column("vs eager", lambda row: _speedup(row.vs_eager, row.needs_review)),
    Column("vs compile", lambda row: _speedup(row.vs_compile, row.needs_review)),
    Column("max err", _error),
]


def table_rows(report: Report) -> list[list[str]]:
    return [[column.cell(row) for column in COLUMNS] for row in report.targets]


def render_terminal(report: Report) -> str:
    rows = [[column.header for column in COLUMNS], *table_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for row in report.targets:
        if row.reason:
            lines.append(f"{row.target}: {row.reason}")
        if device := device_time_line(row):
            lines.append(f"{row.target}: {device}")
        if row.timings.compile_baseline_error:
            lines.append(
                f"{row.target}: torch.compile baseline not measured: "
                f"{row.timings.compile_baseline_error}"
            )
    for row in report.targets:
        lines += spend_terminal(row)
    return "\n".join(lines)


def markdown_table(columns: list[Column], rows: list[TargetReport]) -> list[str]:
    """A markdown table of ``rows``: text cells as code spans, numbers as they are."""
    lines = ["| " + " | ".join(column.header for column in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    for row in rows:
        cells = [
            column.cell(row)
            if column.text is None
            else md.code(column.cell(row), column.text, in_table=True)
            for column in columns
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_markdown(report: Report) -> str:
    lines = ["## kernelpilot results", ""]
    first = report.targets[0] if report.targets else None
    if first:
        lines.append(
            f"Device: {md.plain(first.device, 40)} ({md.plain(first.device_name, 100)}), "
            f"torch {md.plain(first.torch_version, 40)}."
        )
        lines.append("")
    lines += markdown_table(COLUMNS, report.targets)
    for row in report.targets:
        lines += ["", f"### {md.plain(row.target, 200)}: {md.plain(row.status.value, 40)}"]
        if row.reason:
            lines += ["", *md.fenced(row.reason, "text", limit=8000)]
        if device := device_time_line(row):
            lines += ["", device]
        if row.needs_review:
            lines.append(
                "**Speedup above 10x: a human should review this kernel before trusting it.**"
            )
        if row.input_mode == "strengthened":
            lines.append(
                "The problem's own inputs were too weak; signed, rescaled inputs were used."
            )
        if row.checks:
            lines.append("")
            lines += [
                f"- {'✅' if c.passed else '❌'} {md.code(c.name, 80)}: {md.plain(c.detail, 300)}"
                for c in row.checks
            ]
        lines += spend_markdown(row)
    return "\n".join(lines) + "\n"


def render_junit(report: Report) -> str:
    cases = []
    for row in report.targets:
        candidate = row.timings.candidate
        # The table's columns as the case's output: CI shows a target's numbers beside it.
        cells = [f"{column.header}: {column.cell(row)}" for column in COLUMNS[1:]]
        case = TestCase(
            row.target,
            classname=f"kernelpilot.{row.device}",
            elapsed_sec=(candidate.median_ms if candidate else 0) / 1e3,
            stdout="\n".join([row.reason, *cells] if row.reason else cells),
        )
        if row.status is TargetStatus.no_candidate:
            case.add_skipped_info(row.reason)
        elif row.status in ERROR_STATUSES:
            case.add_error_info(row.reason or row.status.value, row.log)
        elif row.status is not TargetStatus.ok:
            case.add_failure_info(row.reason or row.status.value, row.log)
        cases.append(case)
    return to_xml_report_string([TestSuite("kernelpilot", cases)])


def write_report(report: Report, out_dir: Path) -> None:
    """Write report.json, report.md and junit.xml; called after every target."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(report.model_dump_json(indent=2))
    (out_dir / "report.md").write_text(render_markdown(report))
    (out_dir / "junit.xml").write_text(render_junit(report))
