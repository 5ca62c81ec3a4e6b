"""The KernelBench sweep's record (bench/kb_sweep.py): one row per problem, the JSON file
they are kept in, and what is printed of them (progress lines, the summary, a markdown
table)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field

from bench.results_format import BenchmarkRecord, write_record


class SweepRow(BaseModel):
    """One problem's outcome."""

    name: str = Field(description="level/stem of the problem file.")
    device: str
    published_size: bool = Field(description="False when the file was shrunk by --scale-down.")
    reference_status: str = Field(
        description="ok, weak_spec, out_of_memory, user_error, harness_error, interrupted "
        "(the sweep stopped inside this problem), or not_run (the offline proposer has no "
        "candidate, or --propose-only)."
    )
    reference_message: str = Field(default="", description="The error's first lines.")
    reference_s: float | None = None
    candidate_status: str | None = Field(
        default=None,
        description="The verdict's status, or user_error / harness_error; no_candidate (the "
        "offline proposer's reason in candidate_reason), proposer_error (the proposer failed: "
        "how, in candidate_reason) or proposed (--propose-only); None "
        "when the reference failed.",
    )
    candidate_kind: str | None = Field(
        default=None,
        description="copy (the generic candidate), offline (the proposer's), none (the "
        "proposer has nothing to offer) or failed (the proposer failed).",
    )
    candidate_reason: str = Field(default="", description="First 300 characters of the reason.")
    candidate_s: float | None = None
    candidate_phases: dict[str, float] = Field(
        default_factory=dict,
        description="Where the candidate's seconds went, as its verdict's phase_seconds (build, "
        "check, compile, eager_alone, timing, ...).",
    )
    kernel_breakdowns: dict[str, list[tuple[str, float]]] = Field(
        default_factory=dict,
        description="Where one call's device time went (kernel, microseconds), for the "
        "candidate and for each baseline (eager, torch.compile), as the verdict reports them.",
    )
    device_us: dict[str, float] = Field(
        default_factory=dict,
        description="One profiled call's kernels summed, microseconds, for the candidate and "
        "each baseline, as the verdict reports them.",
    )
    speedup_vs_eager: float | None = Field(default=None, description="An ok candidate's.")
    speedup_vs_compile: float | None = Field(default=None, description="An ok candidate's.")
    peak_reference_mib: int | None = Field(
        default=None, description="Most device memory in use (all processes) during reference()."
    )
    peak_candidate_mib: int | None = Field(
        default=None, description="Most device memory in use (all processes) during evaluate()."
    )
    own_peak_reference_mib: int | None = Field(
        default=None,
        description="Most device memory of this sweep's own processes during reference() "
        "(None where nvidia-smi does not name them).",
    )
    own_peak_candidate_mib: int | None = Field(
        default=None, description="The same during evaluate()."
    )
    idle_mib: int | None = Field(default=None, description="Device memory in use before it.")
    beside: int = Field(
        default=0,
        description="Other sweeps sharing the device as this one ran (--beside): its times and "
        "all-process peaks include theirs.",
    )
    memory_error: str = Field(
        default="", description="Lines of the reference's or the verdict's text about memory."
    )
    attempt: int = Field(
        default=1, description="2: run again by --resume after the first try was interrupted."
    )


# Rows of the offline proposer's answer alone, nothing run on the device for them.
PROPOSER_ANSWERS = ("no_candidate", "proposed", "proposer_error")


def write_rows(path: Path | None, record: BenchmarkRecord, rows: list[SweepRow]) -> None:
    """The rows into the sweep's results record, and the record into ``path`` where given."""
    record.rows = [row.model_dump() for row in rows]
    if path is not None:
        write_record(record, path)


def read_rows(path: Path) -> list[SweepRow]:
    """The rows of a results record, or of a file written before it (a JSON list of rows)."""
    data = json.loads(path.read_text())
    listed = data if isinstance(data, list) else BenchmarkRecord.model_validate(data).rows
    return [SweepRow(**row) for row in listed]


def peaks(row: SweepRow) -> tuple[int | None, int | None]:
    """The reference's and the candidate's peak MiB: this sweep's own processes where
    nvidia-smi named them, else every process's."""
    if row.own_peak_reference_mib is not None:
        return row.own_peak_reference_mib, row.own_peak_candidate_mib
    return row.peak_reference_mib, row.peak_candidate_mib


def progress_line(row: SweepRow) -> str:
    if row.candidate_status in PROPOSER_ANSWERS:
        return f"{row.name}: {row.candidate_status.replace('_', ' ')}: {row.candidate_reason}"
    shown = "/".join("-" if p is None else str(p) for p in peaks(row))
    reference = f"reference {row.reference_status} {row.reference_s or 0:.1f} s"
    if row.reference_status != "ok":
        reference += (
            f" ({row.reference_message.splitlines()[0][:160] if row.reference_message else ''})"
        )
    candidate = (
        f"{row.candidate_kind} candidate {row.candidate_status} {row.candidate_s or 0:.1f} s"
        if row.candidate_status
        else "no candidate"
    )
    if row.speedup_vs_eager is not None:
        candidate += f" ({row.speedup_vs_eager:.2f}x eager"
        if row.speedup_vs_compile is not None:
            candidate += f", {row.speedup_vs_compile:.2f}x torch.compile"
        candidate += ")"
    if row.candidate_phases:
        slowest = sorted(row.candidate_phases.items(), key=lambda kv: -kv[1])[:4]
        candidate += " [" + ", ".join(f"{name} {s:.1f} s" for name, s in slowest) + "]"
    return f"{row.name}: {reference}; {candidate}; peak MiB reference/candidate {shown}"


def interrupted(row: SweepRow) -> bool:
    return "interrupted" in (row.reference_status, row.candidate_status)


def summary(rows: list[SweepRow]) -> str:
    reference = Counter(row.reference_status for row in rows)
    candidate = Counter(
        f"{row.candidate_status} ({row.candidate_kind})" if row.candidate_kind else "not run"
        for row in rows
    )
    memory = [row.name for row in rows if row.memory_error]
    sizes = (
        "published sizes"
        if all(r.published_size for r in rows)
        else "NOT all at published sizes (--scale-down)"
    )
    lines = [
        f"{len(rows)} problems, {sizes}",
        "reference: " + ", ".join(f"{k} {v}" for k, v in reference.most_common()),
        "candidate: " + ", ".join(f"{k} {v}" for k, v in candidate.most_common()),
        f"out of memory ({len(memory)}): " + (", ".join(memory) or "none"),
    ]
    reasons = Counter(
        row.candidate_reason.split(":")[0] for row in rows if row.candidate_status == "no_candidate"
    )
    if reasons:
        lines.append(
            f"no candidate ({sum(reasons.values())}): "
            + ", ".join(f"{why} {count}" for why, count in reasons.most_common())
        )
    for kind in ("harness_error", "user_error", "proposer_error", "interrupted"):
        names = [r.name for r in rows if kind in (r.reference_status, r.candidate_status)]
        if names:
            lines.append(f"{kind} ({len(names)}): " + ", ".join(names))
    largest = [(max(p for p in peaks(r) if p is not None), r.name) for r in rows if any(peaks(r))]
    if largest:
        top = sorted(largest, reverse=True)[:5]
        lines.append("largest peaks (MiB): " + ", ".join(f"{name} {mib}" for mib, name in top))
    return "\n".join(lines)


def speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def table(rows: list[SweepRow]) -> str:
    """The rows as a markdown table, for bench/BENCHMARKS.md; a problem without a candidate
    gives the proposer's reason instead of times."""
    lines = [
        "| problem | reference + audit | s | candidate | s | vs eager | vs compile "
        "| peak MiB (reference / candidate) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        if row.candidate_status in PROPOSER_ANSWERS:
            why = row.candidate_reason.replace("|", "/").splitlines()[0][:120]
            lines.append(f"| {row.name} | - | - | {row.candidate_status}: {why} | - | - | - | - |")
            continue
        shown = " / ".join("-" if p is None else str(p) for p in peaks(row))
        own = "" if row.own_peak_reference_mib is not None or not row.beside else " (all)"
        candidate = f"{row.candidate_status} ({row.candidate_kind})" if row.candidate_kind else "-"
        seconds = "-" if row.candidate_s is None else f"{row.candidate_s:.1f}"
        lines.append(
            f"| {row.name} | {row.reference_status} | {row.reference_s or 0:.1f} | {candidate} "
            f"| {seconds} | {speedup(row.speedup_vs_eager)} | {speedup(row.speedup_vs_compile)} "
            f"| {shown}{own} |"
        )
    return "\n".join(lines)
