"""The one results format of the benchmark suite: a ``BenchmarkRecord`` per run, written as JSON
with ``--out FILE`` (else the benchmark prints its table). The header says what ran, where and
on which commit; ``rows`` are what the benchmark measures (one dict per row, its own keys)."""

from __future__ import annotations

import platform
import shlex
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, Field

ROOT = Path(__file__).resolve().parent.parent


class BenchmarkRecord(BaseModel):
    """One run of one benchmark."""

    benchmark: str = Field(description="The benchmark's name in `python -m bench NAME`.")
    device: str = Field(description="cpu or cuda.")
    device_name: str = Field(description="The GPU's name on cuda, the processor's on cpu.")
    torch: str = Field(description="torch.__version__ (with torch.version.cuda on cuda).")
    python: str = Field(description="platform.python_version().")
    commit: str = Field(description="kernelpilot's git HEAD, or 'unknown' outside a checkout.")
    command: str = Field(description="The command line that ran the benchmark.")
    date: str = Field(description="When the run started, ISO 8601 in UTC.")
    context: dict[str, Any] = Field(
        default_factory=dict,
        description="Facts of the run every row shares (copy bandwidth, the timer's floor...).",
    )
    rows: list[dict[str, Any]] = Field(description="What the benchmark measured, one per row.")


def kernelpilot_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        )
    except OSError:  # no git on this machine
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine() or "cpu"


def new_record(
    benchmark: str,
    device: str,
    rows: list[dict[str, Any]] | None = None,
    context: dict[str, Any] | None = None,
) -> BenchmarkRecord:
    """A record of this process's run: the header filled in, ``rows`` as given (or none yet)."""
    import torch

    cuda = f" (CUDA {torch.version.cuda})" if device == "cuda" else ""
    return BenchmarkRecord(
        benchmark=benchmark,
        device=device,
        device_name=device_name(device),
        torch=torch.__version__ + cuda,
        python=platform.python_version(),
        commit=kernelpilot_commit(),
        command=shlex.join([Path(sys.executable).name, "-m", "bench", *sys.argv[1:]]),
        date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        context=context or {},
        rows=rows or [],
    )


def write_record(record: BenchmarkRecord, out: Path) -> None:
    """Write the record whole (a run rewrites it as rows come: one stopped keeps what it did)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(record.model_dump_json(indent=2))
    partial.replace(out)


def read_record(path: Path) -> BenchmarkRecord:
    return BenchmarkRecord.model_validate_json(path.read_text())


def finish(record: BenchmarkRecord, out: Path | None, table: Callable[[BenchmarkRecord], str]):
    """The end of a run: the record to ``out`` where given, the table printed either way."""
    if out is not None:
        write_record(record, out)
        print(f"wrote {out}", file=sys.stderr)
    print(table(record))


out_option = click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the results record (JSON, bench/results_format.py) here; without it, only the "
    "table is printed.",
)
