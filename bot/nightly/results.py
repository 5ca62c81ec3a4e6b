"""The results of one night: what the nightly's measuring job hands its publishing job, as
``nightly-results.json`` in an artifact.

The measuring job ran the repository's code (its modules, input factories and shipped
kernels), and anything that code left running could rewrite the file before it is uploaded. To
the publishing job, which holds the write token, the file is untrusted input:
``load_nightly_results`` caps its size, validates it against these models (a field this
version does not write, such as a branch or an issue, is refused), and checks that it is about
the repository and commit of the publishing job's own run, on a night near today, with one
row per benchmark, each named as the nightly names them. Where the night is written (the data
branch, the issue) is the publishing job's own setting, never the file's; its text is shown as
code (``bot.nightly.run.render_table``).
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bot.artifact import read_artifact
from bot.nightly.measure import BREAKING, NightlyRow
from harness.errors import UserError

SCHEMA_VERSION = 1
RESULTS_FILE = "nightly-results.json"
MAX_RESULTS_BYTES = 8 * 1024 * 1024
MAX_ROWS = 500
MAX_TEXT = 4000  # a row's reason, a record's note: a log cut by the measuring job
ROW_STATUSES = {*BREAKING, "ok", "alert", "unjudged"}
COMMIT = re.compile(r"[0-9a-f]{40}")
STATUS = re.compile(r"[a-z_]{1,32}")
# kernel:<path>_kernelpilot.py (a shipped kernel) or target:<path>.py:<Class>; the path relative,
# without "..", backslashes or control characters.
BENCHMARK = re.compile(r"kernel:(?P<kernel>[^:]+_kernelpilot\.py)|target:(?P<target>[^:]+\.py):\w+")


def capped(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class NightlyResults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    repository: str = Field(description="owner/name the night was measured for.")
    commit: str = Field(description="The commit measured (the default branch's head).")
    night: str = Field(description="The date, YYYY-MM-DD (UTC).")
    rows: list[NightlyRow] = Field(default_factory=list)
    run_url: str = ""

    def save(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / RESULTS_FILE
        path.write_text(self.model_dump_json(indent=2))
        return path

    @property
    def breaks_night(self) -> bool:
        return any(row.breaks_night for row in self.rows)


class Expected(BaseModel):
    """What the publishing job knows on its own: its run's repository and commit, and today."""

    repository: str
    commit: str
    today: datetime.date


def load_nightly_results(results_dir: Path, expected: Expected) -> NightlyResults:
    """Read and check the measuring job's results against the publishing job's own run."""
    path = results_dir / RESULTS_FILE
    where = str(path)
    results = read_artifact(
        path, NightlyResults, MAX_RESULTS_BYTES, "nightly results", "nightly measuring job",
        "kernelpilot github nightly-measure",
    )  # fmt: skip
    problem = _problem(results, expected)
    if problem:
        raise UserError(
            f"refusing the nightly results: {problem}",
            where=where,
            fix="publish the artifact of this same workflow run's measuring job",
        )
    return results


def _problem(results: NightlyResults, expected: Expected) -> str | None:
    """The first thing in ``results`` that the measuring job of this run would not have
    written; None when there is none."""
    if results.schema_version != SCHEMA_VERSION:
        return f"schema_version {results.schema_version}, this version reads {SCHEMA_VERSION}"
    if results.repository != expected.repository:
        return f"they are for {results.repository!r}, this run is for {expected.repository!r}"
    if results.commit != expected.commit or not COMMIT.fullmatch(results.commit):
        return f"they are for commit {results.commit!r}, this run is for {expected.commit!r}"
    try:
        night = datetime.date.fromisoformat(results.night)
    except ValueError:
        return f"night {results.night!r} is not a date (YYYY-MM-DD)"
    if not -2 <= (night - expected.today).days <= 1:
        return f"night {results.night} is not this run's (today is {expected.today})"
    if len(results.rows) > MAX_ROWS:
        return f"{len(results.rows)} rows, more than {MAX_ROWS}"
    seen: set[str] = set()
    for index, row in enumerate(results.rows):
        problem = _row_problem(row, results)
        if problem is None and row.benchmark in seen:
            problem = "a second row for this benchmark"
        if problem:
            return f"rows[{index}] ({row.benchmark[:80]!r}): {problem}"
        seen.add(row.benchmark)
    return None


def _row_problem(row: NightlyRow, results: NightlyResults) -> str | None:
    record = row.record
    if not _valid_benchmark(row.benchmark) or record.benchmark != row.benchmark:
        return "not a benchmark name the nightly writes (kernel:<path> or target:<path>:<Class>)"
    if record.commit != results.commit or record.night != results.night:
        return "its record is for another commit or night than the results"
    if row.status not in ROW_STATUSES or not STATUS.fullmatch(record.status):
        return f"status {row.status!r} / {record.status!r} is not one the nightly writes"
    texts = [row.reason, row.verdict.reason if row.verdict else "", *_record_texts(row)]
    if any(len(text) > MAX_TEXT for text in texts):
        return f"a text longer than {MAX_TEXT} characters"
    return None


def _record_texts(row: NightlyRow) -> list[str]:
    record = row.record
    return [record.note, record.device, record.device_name, record.driver, record.torch,
            record.cuda or "", record.run_url]  # fmt: skip


def _valid_benchmark(name: str) -> bool:
    match = BENCHMARK.fullmatch(name)
    if match is None or len(name) > 300:
        return False
    path = match["kernel"] or match["target"]
    parts = path.split("/")
    return not (
        path.startswith("/")
        or "\\" in path
        or any(part in ("", ".", "..") for part in parts)
        or any(ord(char) < 32 or ord(char) == 127 for char in path)
    )
