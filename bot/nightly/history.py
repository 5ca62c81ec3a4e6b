"""The nightly history's records: one record per benchmark per night, kept in the repository
on a data branch (``kernelpilot-data`` by default) as ``history/<benchmark>.jsonl``, one JSON
object a line; where each benchmark's file and plot are, and how a file's lines are read.
Where the files are read and written is ``bot.nightly.stores``.

A line that does not parse (a hand edit, a merge gone wrong) is reported with its file and
line number and left as it is; the other lines and the night's new records are kept.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from pydantic import BaseModel, Field, ValidationError

DEFAULT_BRANCH = "kernelpilot-data"
FOLDER = "history"
PLOTS = "plots"


class Measure(NamedTuple):
    """One timed thing of a night: its median, spread, and the night's re-measurements."""

    median_ms: float | None
    iqr_ms: float
    remeasured_ms: list[float]


class Record(BaseModel):
    """One benchmark's night. Fields added later have defaults: older lines still load."""

    benchmark: str = Field(
        description="'kernel:path_kernelpilot.py' (a shipped kernel), or 'target:path.py:Class' "
        "(a configured target without one: eager and torch.compile only)."
    )
    night: str = Field(description="The date, YYYY-MM-DD (UTC).")
    commit: str
    run_url: str = ""
    device: str
    device_name: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str | None = None
    status: str = Field(description="ok, stale, failed, or a harness status.")
    time_ms: float | None = Field(default=None, description="The kernel's median time.")
    iqr_ms: float = 0.0
    remeasured_ms: list[float] = Field(
        default_factory=list, description="The same night's re-measurements of a suspect kernel."
    )
    eager_ms: float | None = None
    compile_ms: float | None = None
    eager_iqr_ms: float = 0.0
    compile_iqr_ms: float = 0.0
    remeasured_eager_ms: list[float] = Field(
        default_factory=list, description="Re-measurements of a suspect target's eager time."
    )
    remeasured_compile_ms: list[float] = Field(
        default_factory=list, description="Re-measurements of a suspect target's compiled time."
    )
    note: str = ""

    @property
    def has_kernel(self) -> bool:
        """A shipped kernel's night; else a configured target's, timed without a kernel."""
        return self.benchmark.startswith("kernel:")

    def measures(self) -> dict[str, Measure]:
        """What a night is judged and plotted by: the kernel's time, or (a target without a
        kernel) eager's and torch.compile's. The lists are the record's own: appended to."""
        if self.has_kernel:
            return {"kernel": Measure(self.time_ms, self.iqr_ms, self.remeasured_ms)}
        return {
            "eager": Measure(self.eager_ms, self.eager_iqr_ms, self.remeasured_eager_ms),
            "torch.compile": Measure(
                self.compile_ms, self.compile_iqr_ms, self.remeasured_compile_ms
            ),
        }

    @property
    def setup(self) -> str:
        """What must stay the same for two nights to be one series."""
        return f"{self.device_name or self.device}|driver {self.driver}|torch {self.torch}|cuda {self.cuda}"


class Problem(BaseModel):
    """A line of a history file that could not be read."""

    path: str
    line: int
    error: str


class History(BaseModel):
    records: dict[str, list[Record]] = Field(default_factory=dict, description="By benchmark.")
    problems: list[Problem] = Field(default_factory=list)
    tip: str | None = Field(default=None, description="The data branch's commit read.")


def slug(benchmark: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", benchmark).strip("_")


def file_of(benchmark: str) -> str:
    """The history file of a benchmark: its name made safe for a path."""
    return f"{FOLDER}/{slug(benchmark)}.jsonl"


def plot_of(benchmark: str) -> str:
    """Where a benchmark's plot is kept beside its history."""
    return f"{PLOTS}/{slug(benchmark)}.png"


def parse_lines(path: str, text: str) -> tuple[list[Record], list[Problem]]:
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(Record.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problems.append(Problem(path=path, line=number, error=f"{first['msg']} ({where})"))
    return records, problems


def add_file(history: History, path: str, text: str) -> None:
    """A history file's records added to ``history``, its unreadable lines to its problems."""
    records, problems = parse_lines(path, text)
    history.problems += problems
    for record in records:
        history.records.setdefault(record.benchmark, []).append(record)
