"""Reports: one row per target, rendered as JSON, markdown, JUnit XML and a terminal table."""

from __future__ import annotations

from pathlib import Path

from junit_xml import TestCase, TestSuite, to_xml_report_string
from pydantic import BaseModel, Field

from harness.accept import honest_baseline
from harness.records import Check, EvalResult


class TargetReport(BaseModel):
    """The outcome for one target; ``status`` is an EvalResult status or a target-level one."""

    target: str
    device: str
    device_name: str = ""
    torch_version: str = ""
    status: str = Field(description="ok, a failure status, no_candidate, weak_spec or error.")
    reason: str = ""
    eager_ms: float | None = Field(
        default=None,
        description="The eager time speedup_vs_eager is taken against: the faster of "
        "eager_beside_ms and eager_alone_ms.",
    )
    eager_beside_ms: float | None = Field(
        default=None, description="Eager timed interleaved with the candidate."
    )
    eager_alone_ms: float | None = Field(
        default=None, description="Eager timed before the candidate was loaded (same worker)."
    )
    compile_ms: float | None = None
    candidate_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    faster_than_eager: bool = False
    faster_than_compile: bool = False
    noise_floor: float | None = None
    needs_review: bool = False
    max_abs_error: float | None = None
    rel_error: float | None = None
    input_mode: str = "as_given"
    compile_baseline_error: str | None = None
    candidate_file: str | None = None
    checks: list[Check] = Field(default_factory=list)
    log: str = ""

    @classmethod
    def from_result(
        cls, target: str, result: EvalResult, candidate_file: str | None
    ) -> TargetReport:
        return cls(
            target=target,
            device=result.device,
            device_name=result.device_name,
            torch_version=result.torch_version,
            status=result.status.value,
            reason=result.reason,
            eager_ms=honest_baseline(result.eager, result.eager_alone).median_ms
            if result.eager
            else None,
            eager_beside_ms=result.eager.median_ms if result.eager else None,
            eager_alone_ms=result.eager_alone.median_ms if result.eager_alone else None,
            compile_ms=result.compiled.median_ms if result.compiled else None,
            candidate_ms=result.candidate.median_ms if result.candidate else None,
            speedup_vs_eager=result.speedup_vs_eager,
            speedup_vs_compile=result.speedup_vs_compile,
            faster_than_eager=bool(result.vs_eager and result.vs_eager.faster),
            faster_than_compile=bool(result.vs_compile and result.vs_compile.faster),
            noise_floor=result.vs_eager.noise_floor if result.vs_eager else None,
            needs_review=bool(result.vs_eager and result.vs_eager.needs_review)
            or bool(result.vs_compile and result.vs_compile.needs_review),
            max_abs_error=result.max_abs_error,
            rel_error=result.rel_error,
            input_mode=result.input_mode,
            compile_baseline_error=result.compile_baseline_error,
            candidate_file=candidate_file,
            checks=result.checks,
            log=result.log[-4000:],
        )


class Report(BaseModel):
    targets: list[TargetReport] = Field(default_factory=list)


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


def _speedup(value: float | None, faster: bool, review: bool) -> str:
    if value is None:
        return "-"
    mark = " ⚠ review" if review else ("" if faster else " (noise)")
    return f"{value:.2f}x{mark}"


def table_rows(report: Report) -> list[list[str]]:
    return [
        [
            row.target,
            row.status,
            _ms(row.eager_ms),
            _ms(row.compile_ms),
            _ms(row.candidate_ms),
            _speedup(row.speedup_vs_eager, row.faster_than_eager, row.needs_review),
            _speedup(row.speedup_vs_compile, row.faster_than_compile, row.needs_review),
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
        lines.append(f"Device: {first.device} ({first.device_name}), torch {first.torch_version}.")
        lines.append("")
    lines.append("| " + " | ".join(COLUMNS) + " |")
    lines.append("|" + "---|" * len(COLUMNS))
    for cells in table_rows(report):
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    for row in report.targets:
        lines += ["", f"### {row.target}: {row.status}"]
        if row.reason:
            lines.append(f"{row.reason}")
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
            lines += [f"- {'✅' if c.passed else '❌'} `{c.name}`: {c.detail}" for c in row.checks]
    return "\n".join(lines) + "\n"


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
        elif row.status in ("build_error", "runtime_error", "timeout", "error", "weak_spec"):
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
