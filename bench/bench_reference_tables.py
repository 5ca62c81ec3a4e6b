"""What ``python -m bench reference`` (bench/bench_reference.py) prints of its results: a problem's progress line, the
markdown table of one run, and the before/after table of two (``--compare``, whose sides
``load_side`` reads from --out files)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.results_format import BenchmarkRecord

GIB = 2**30


def as_result(record: BenchmarkRecord) -> dict:
    """The run as one dict, its problems under "problems": the shape --out files had before
    the results record, which --compare still reads."""
    return {**record.context, "device": record.device, "problems": record.rows}


def gib(value: int | None) -> str:
    return "-" if value is None else f"{value / GIB:.1f}"


def peak_text(row: dict) -> str:
    """Peak device GiB: the report's own figure / nvidia-smi's."""
    return f"{gib(row.get('peak_device_bytes'))} / {gib(row.get('smi_peak_bytes'))}"


def phases_text(row: dict) -> str:
    phases = row.get("phase_seconds") or {}
    return ", ".join(f"{key} {value:.1f}" for key, value in phases.items()) or "-"


def verdict_text(row: dict) -> str:
    first = row.get("verdict", "-").splitlines()[0].replace("|", "/")
    return first[:140] + ("..." if len(first) > 140 else "")


def seconds(row: dict, key: str, digits: int = 1) -> str:
    return f"{row[key]:.{digits}f}" if key in row else "-"


def reference_text(row: dict) -> str:
    """The reference seconds; of a repeated measurement, the median and the runs' range."""
    runs = row.get("reference_runs_s") or []
    spread = f" ({min(runs):.1f}-{max(runs):.1f})" if len(runs) > 1 else ""
    return f"{row['reference_s']:.1f}{spread}"


def progress_line(row: dict) -> str:
    yard = row["yardstick"]
    cases = yard.get("case_s")
    error = (yard.get("error") or "yardstick failed").splitlines()[-1]
    cases_text = f"{sum(cases):.2f} s for {len(cases)} cases" if cases else error
    return (
        f"reference+audit {reference_text(row)} s, goal {row['goal_s']:.1f} s (cases "
        f"{cases_text}), ratio {row['ratio']:.2f}, peak {peak_text(row)}; "
        f"{row['verdict'].splitlines()[0][:200]}"
    )


def markdown_table(record: BenchmarkRecord) -> str:
    result = as_result(record)
    sizes = (
        "published sizes"
        if result["published_sizes"]
        else (f"NOT the published sizes: shapes shrunk by --scale-down {result['scale_down']}")
    )
    lines = [
        f"Reference + audit on {result['device']}, harness {result['harness']}, {sizes}; "
        f"goal = worker start {result['worker_start_s']:.2f} s + 3 x cases; peak GiB = "
        "the report's / nvidia-smi's"
        + (
            f"; reference+audit: the median of {result['repeat']} runs (their range)"
            if result.get("repeat", 1) > 1
            else ""
        ),
        "",
        "| problem | reference+audit s | yardstick (goal) s | ratio | goal met | peak device GiB "
        "| phases s | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in result["problems"]:
        if "goal_s" not in row:
            lines.append(f"| {row['problem']} | - | - | - | no | - | - | {verdict_text(row)} |")
            continue
        lines.append(
            f"| {row['problem']} | {reference_text(row)} | {row['goal_s']:.1f} | "
            f"{row['ratio']:.2f} | {'yes' if row['goal_met'] else 'no'} | {peak_text(row)} | "
            f"{phases_text(row)} | {verdict_text(row)} |"
        )
    return "\n".join(lines)


def load_side(paths: str) -> dict:
    """One side of the comparison: --out files joined by commas (a run split over device
    calls), their problems merged in order (a later file's row replaces an earlier one's)."""
    parts = [_side_part(json.loads(Path(path).read_text())) for path in paths.split(",")]
    rows = {row["problem"]: row for part in parts for row in part["problems"]}
    harnesses = sorted({part["harness"] for part in parts})
    return {**parts[-1], "harness": " & ".join(harnesses), "problems": list(rows.values())}


def compare_table(before: dict, after: dict) -> str:
    """One row per problem: reference+audit seconds before and after, peaks, verdicts."""
    old = {row["problem"]: row for row in before["problems"]}
    published = before["published_sizes"] and after["published_sizes"]
    sizes = "published sizes" if published else "NOT the published sizes (--scale-down)"
    lines = [
        f"Before: harness {before['harness']}; after: harness {after['harness']}; "
        f"device {after['device']}; {sizes}",
        "",
        "| problem | reference+audit s before | after | yardstick (goal) s | ratio after | goal met | "
        "peak device GiB before | after | verdict before | verdict after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in after["problems"]:
        prior = old.get(row["problem"], {})
        lines.append(
            f"| {row['problem']} | {seconds(prior, 'reference_s')} | {seconds(row, 'reference_s')} | "
            f"{seconds(row, 'goal_s')} | {seconds(row, 'ratio', 2)} | "
            f"{'yes' if row.get('goal_met') else 'no'} | {peak_text(prior) if prior else '-'} | "
            f"{peak_text(row)} | {verdict_text(prior) if prior else '-'} | {verdict_text(row)} |"
        )
    return "\n".join(lines)


def _side_part(data: dict) -> dict:
    """A results record, or a file written before it (its problems already under "problems")."""
    return as_result(BenchmarkRecord.model_validate(data)) if "benchmark" in data else data
