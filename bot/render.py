"""Rendering the report record: terminal table, markdown, JUnit XML, and the files.

The markdown (report.md) puts every string of the report through ``bot.markdown``, as the
pull-request comment does: targets, reasons and checks may come from a pull request's code."""

from __future__ import annotations

from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string

from bot import markdown as md
from bot.report import Report

COLUMNS = [
    "target",
    "status",
    "eager ms",
    "compile ms",
    "kernel ms",
    "vs eager",
    "vs compile",
    "max err",
]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _speedup(value: float | None, faster: bool, slower: bool, review: bool) -> str:
    """A ratio as a reader takes it: faster, slower, or within the noise either way."""
    if value is None:
        return "-"
    if review:
        return f"{value:.2f}x ⚠ review"
    return f"{value:.2f}x" + ("" if faster else " slower" if slower else " (within noise)")


def table_rows(report: Report) -> list[list[str]]:
    return [
        [
            row.target,
            row.status,
            _ms(row.eager_ms),
            _ms(row.compile_ms),
            _ms(row.candidate_ms),
            _speedup(
                row.speedup_vs_eager, row.faster_than_eager, row.slower_than_eager, row.needs_review
            ),
            _speedup(
                row.speedup_vs_compile,
                row.faster_than_compile,
                row.slower_than_compile,
                row.needs_review,
            ),
            "-" if row.max_abs_error is None else f"{row.max_abs_error:.2e}",
        ]
        for row in report.targets
    ]


def render_terminal(report: Report) -> str:
    rows = [COLUMNS, *table_rows(report)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    for row in report.targets:
        if row.reason:
            lines.append(f"{row.target}: {row.reason}")
        if row.compile_baseline_error:
            lines.append(
                f"{row.target}: torch.compile baseline not measured: {row.compile_baseline_error}"
            )
    return "\n".join(lines)


def render_markdown(report: Report) -> str:
    lines = ["## kernelpilot results", ""]
    first = report.targets[0] if report.targets else None
    if first:
        lines.append(
            f"Device: {md.plain(first.device, 40)} ({md.plain(first.device_name, 100)}), "
            f"torch {md.plain(first.torch_version, 40)}."
        )
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for cells in table_rows(report):
        target, status, *numbers = cells
        text = [md.code(target, in_table=True), md.code(status, 40, in_table=True)]
        lines.append("| " + " | ".join([*text, *numbers]) + " |")
    for row in report.targets:
        lines += ["", f"### {md.plain(row.target, 200)}: {md.plain(row.status, 40)}"]
        if row.reason:
            lines += ["", *md.fenced(row.reason, "text", limit=8000)]
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
    return "\n".join(lines) + "\n"


# Statuses shown as JUnit errors (no output was judged), the others as failures.
ERROR_STATUSES = ("build_error", "runtime_error", "timeout", "harness_error", "error", "weak_spec")


def render_junit(report: Report) -> str:
    cases = []
    for row in report.targets:
        case = TestCase(
            row.target,
            classname=f"kernelpilot.{row.device}",
            elapsed_sec=(row.candidate_ms or 0) / 1e3,
            stdout=row.reason,
        )
        if row.status == "no_candidate":
            case.add_skipped_info(row.reason)
        elif row.status in ERROR_STATUSES:
            case.add_error_info(row.reason or row.status, row.log)
        elif row.status != "ok":
            case.add_failure_info(row.reason or row.status, row.log)
        cases.append(case)
    return to_xml_report_string([TestSuite("kernelpilot", cases)])


def write_report(report: Report, out_dir: Path) -> None:
    """Write report.json, report.md and junit.xml; called after every target."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(report.model_dump_json(indent=2))
    (out_dir / "report.md").write_text(render_markdown(report))
    (out_dir / "junit.xml").write_text(render_junit(report))
