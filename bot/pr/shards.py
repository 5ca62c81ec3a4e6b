"""One run over several GPU runners: an Actions matrix of shards.

``kernelpilot github plan`` (no pull-request code runs: detection reads the head commit's files
as text) splits what the event asks for (a pull request's changed modules, or a manual run's
targets) into shards, put out as the matrix of the measuring job; each shard's ``measure
--only`` measures its part on its own runner and uploads its results; ``kernelpilot github
merge`` (in the publishing job, which never runs the pull request's code) joins them into one
results folder, which ``publish`` then reads as it reads one job's.

Every shard's results are untrusted, as one job's are: each is loaded and checked against the
event by ``bot.pr.results.load_results``, they must agree on what run they are of, and no two may
answer for the same module. A planned shard whose results are missing (its job failed or was
cancelled) is said in the comment, with its modules, never passed over.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, Field

from bot.detect.records import ChangedModule, ChangeReport
from bot.event import Event
from bot.pr.results import RESULTS_FILE, PullResults, load_results
from bot.report import Report
from harness.errors import UserError

MAX_SHARDS = 256  # GitHub's own limit on a matrix's jobs


class Shard(BaseModel):
    """One job of the matrix: which of the run's modules or targets it measures."""

    shard: int = Field(ge=1, le=MAX_SHARDS)
    only: str = Field(description="Space-separated: measure's --only.", max_length=100_000)

    def names(self) -> list[str]:
        return self.only.split()


class Plan(BaseModel):
    """The matrix (``strategy.matrix: ${{ fromJSON(...) }}``), one entry a shard."""

    include: list[Shard] = Field(min_length=1, max_length=MAX_SHARDS)


def plan(names: list[str], shards: int) -> Plan:
    """``names`` in at most ``shards`` contiguous parts of near-equal size, in their order (a
    file's classes stay together, the cap's order is kept); one shard of nothing where there
    is nothing (a matrix cannot be empty: that shard measures the event as a whole)."""
    if not 1 <= shards <= MAX_SHARDS:
        raise UserError(
            f"shards is {shards}", where="kernelpilot github plan", fix=f"give 1 to {MAX_SHARDS}"
        )
    spaced = [name for name in names if len(name.split()) != 1]
    if spaced:
        raise UserError(
            f"{spaced[0]!r} has white space: a shard names its modules space-separated",
            where="kernelpilot github plan",
            fix="rename the file, or run this pull request without the matrix (one measure job)",
        )
    count = min(shards, len(names)) or 1
    size, extra = divmod(len(names), count)
    parts, start = [], 0
    for index in range(count):
        end = start + size + (index < extra)
        parts.append(Shard(shard=index + 1, only=" ".join(names[start:end])))
        start = end
    return Plan(include=parts)


def module_key(module: ChangedModule) -> str:
    return f"{module.path}:{module.class_name}"


def read_plan(text: str, where: str) -> Plan:
    try:
        return Plan.model_validate_json(text)
    except ValueError as err:
        raise UserError(
            f"the plan is not kernelpilot github plan's matrix: {str(err)[:300]}",
            where=where,
            fix="pass the plan job's output matrix as it was put out",
        ) from None


def load_shards(folder: Path, event: Event) -> dict[str, PullResults]:
    """Each shard's results in ``folder`` (one sub-folder an artifact, as download-artifact
    leaves them), by sub-folder, each checked against this run's event."""
    found = sorted((path.parent for path in folder.glob(f"*/{RESULTS_FILE}")), key=_natural)
    if not found:
        raise UserError(
            f"no shard's {RESULTS_FILE} in {folder}",
            where=str(folder),
            fix="download the measuring jobs' artifacts into one folder each (download-artifact "
            "with pattern: kernelpilot-results-*)",
        )
    return {path.name: load_results(path, event) for path in found}


def _natural(path: Path) -> list:
    """kernelpilot-results-2 before kernelpilot-results-10: the plan's order, kept."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in
            re.split(r"(\d+)", path.name)]  # fmt: skip


AGREED = ("mode", "repository", "pull_number", "commit", "base_ref", "head_ref", "fork",
          "judged_by", "test_dir")  # fmt: skip


def merge(shards: dict[str, PullResults], planned: Plan | None) -> PullResults:
    """One run's results from its shards': their rows, sources and changed modules joined.
    Refused where they are of different runs, or where two answer for one module; a planned
    shard without results is said, with its modules."""
    names = list(shards)
    first = shards[names[0]]
    for name in names[1:]:
        for field in AGREED:
            if getattr(shards[name], field) != getattr(first, field):
                raise _refused(f"shard {name}'s {field} differs from shard {names[0]}'s")
    merged = first.model_copy(deep=True)
    merged.shard = None
    merged.sandbox = "off" if any(s.sandbox == "off" for s in shards.values()) else "bubblewrap"
    merged.report = Report(review_speedup=first.report.review_speedup)
    merged.sources, merged.changes = {}, _joined_changes(shards)
    owner: dict[str, str] = {}
    for name, results in shards.items():
        for row in results.report.targets:
            if row.target in owner:
                raise _refused(
                    f"{row.target} was measured by shards {owner[row.target]} and {name}"
                )
            owner[row.target] = name
            merged.report.targets.append(row)
        for target, source in results.sources.items():  # a shard's sources: of its own rows
            if owner.get(target) != name:
                raise _refused(f"shard {name} gives the source of {target}, not one of its rows")
            merged.sources[target] = source
    merged.note = "" if merged.report.targets else first.note
    if planned is not None:
        _say_missing(merged, planned, [s.shard for s in shards.values()])
    return merged


def _joined_changes(shards: dict[str, PullResults]) -> ChangeReport | None:
    reports = [results.changes for results in shards.values() if results.changes is not None]
    if not reports:
        return None
    joined = reports[0].model_copy(deep=True)
    joined.modules, joined.over_cap, seen = [], [], set()
    for report in reports:
        for module in report.modules:
            if module_key(module) in seen:
                raise _refused(f"{module_key(module)} is a changed module of two shards")
            seen.add(module_key(module))
            joined.modules.append(module)
    for report in reports:
        joined.over_cap += [m for m in report.over_cap if module_key(m) not in seen]
        seen |= {module_key(m) for m in report.over_cap}
        joined.notes += [note for note in report.notes if note not in joined.notes]
    return joined


def _say_missing(merged: PullResults, planned: Plan, present: list[list[str] | None]) -> None:
    """A note for each planned shard whose results did not come."""
    came = {" ".join(names) for names in present if names is not None}
    for shard in planned.include:
        if shard.only and shard.only not in came:
            listed = ", ".join(shard.names()[:10]) + (
                " and more" if len(shard.names()) > 10 else ""
            )
            note = (
                f"Shard {shard.shard} of {len(planned.include)} left no results (its job failed "
                f"or was cancelled: see the run), so these were not measured: {listed}."
            )
            if merged.changes is not None:
                merged.changes.notes.append(note)
            else:  # a manual run has no list of changes to note it in: it heads the comment
                merged.note = f"{merged.note} {note}".strip()


def _refused(what: str) -> UserError:
    return UserError(
        f"the shards' results do not join: {what}",
        where="kernelpilot github merge",
        fix="merge the artifacts of one workflow run, each shard's once; otherwise a measuring "
        "job's output was tampered with",
    )


def matrix_json(planned: Plan) -> str:
    return json.dumps(planned.model_dump(mode="json"), separators=(",", ":"))
