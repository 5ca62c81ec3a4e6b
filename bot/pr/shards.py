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

from bot.detect.records import ChangeReport
from bot.event import Event
from bot.pr.results import RESULTS_FILE, PullResults, load_results
from bot.report import Report
from harness.errors import UserError

MAX_SHARDS = 256  # GitHub's own limit on a matrix's jobs
MAX_PLAN_BYTES = 64 * 1024  # the matrix reaches merge as one environment variable (128 KiB max)


class Shard(BaseModel):
    """One job of the matrix: which of the run's modules or targets it measures."""

    shard: int = Field(ge=1, le=MAX_SHARDS)
    only: str = Field(description="Space-separated: measure's --only.", max_length=MAX_PLAN_BYTES)

    def names(self) -> list[str]:
        return self.only.split()


class Plan(BaseModel):
    """The matrix (``strategy.matrix: ${{ fromJSON(...) }}``), one entry a shard."""

    include: list[Shard] = Field(min_length=1, max_length=MAX_SHARDS)


def plan(names: list[str], shards: int) -> Plan:
    """``names`` (each once) dealt over at most ``shards`` parts in turn, so that the first
    ones (detection puts the configured targets first) spread over every runner; one shard of
    nothing where there is nothing (a matrix cannot be empty: that shard measures the event as
    a whole)."""
    names = list(dict.fromkeys(names))  # a class defined twice in a file is one module here
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
    planned = Plan(
        include=[Shard(shard=i + 1, only=" ".join(names[i::count])) for i in range(count)]
    )
    if len(matrix_json(planned)) > MAX_PLAN_BYTES:
        raise UserError(
            f"{len(names)} changed modules make a matrix over {MAX_PLAN_BYTES // 1024} KiB, "
            "more than an Actions output passed on as one variable holds",
            where="kernelpilot github plan",
            fix="lower max-targets, or run this pull request with one measure job "
            "(kernelpilot-pr.yml)",
        )
    return planned


def plan_order(planned: Plan) -> dict[str, int]:
    """Each planned name's place in the order it was planned in (``plan`` dealt them)."""
    count = len(planned.include)
    return {
        name: place * count + index
        for index, shard in enumerate(planned.include)
        for place, name in enumerate(shard.names())
    }


def keep_shard(changes: ChangeReport, only: list[str]) -> None:
    """What one measure job keeps of detection's changes: its shard's modules (the modules over
    the cap stay: every shard says them, merge joins them); a named module detection did not
    find is said (the plan was made from another detection: it should not happen)."""
    keys = {module.key: module for module in changes.modules}
    changes.modules = [module for key, module in keys.items() if key in only]
    unknown = [name for name in only if name not in keys]
    if unknown:
        changes.notes.append(
            f"This shard was to measure {', '.join(unknown[:10])}, which this commit's changes "
            "do not name: the plan was made for another commit."
        )


def read_plan(text: str, where: str) -> Plan:
    try:
        return Plan.model_validate_json(text)
    except ValueError as err:
        raise UserError(
            f"the plan is not kernelpilot github plan's matrix: {str(err)[:300]}",
            where=where,
            fix="pass the plan job's output matrix as it was put out",
        ) from None


def load_shards(folder: Path, event: Event) -> tuple[dict[str, PullResults], dict[str, str]]:
    """Each shard's results in ``folder`` (one sub-folder an artifact, as download-artifact
    leaves them), by sub-folder, each checked against this run's event; and the shards refused
    by that check, with why (said in the comment beside the others' results)."""
    found = (
        sorted((path.parent for path in folder.glob(f"*/{RESULTS_FILE}")), key=_natural)
        if folder.is_dir()
        else []
    )
    loaded: dict[str, PullResults] = {}
    refused: dict[str, str] = {}
    for path in found:
        try:
            loaded[path.name] = load_results(path, event)
        except UserError as err:
            refused[path.name] = err.what[:300]
    if not loaded:
        why = f": {'; '.join(f'{k}: {v}' for k, v in refused.items())[:1000]}" if refused else ""
        raise UserError(
            f"no measure job's {RESULTS_FILE} to publish in {folder}{why}",
            where=str(folder),
            fix="see the measure jobs' logs (each uploads kernelpilot-results-<shard>; the "
            "publish job downloads them with pattern: kernelpilot-results-*)",
        )
    return loaded, refused


def _natural(path: Path) -> list:
    """kernelpilot-results-2 before kernelpilot-results-10."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in
            re.split(r"(\d+)", path.name)]  # fmt: skip


AGREED = ("mode", "repository", "pull_number", "commit", "base_ref", "head_ref", "fork",
          "judged_by", "test_dir")  # fmt: skip


def merge(
    shards: dict[str, PullResults], planned: Plan | None, refused: dict[str, str] | None = None
) -> PullResults:
    """One run's results from its shards': their rows, sources and changed modules joined, in
    the plan's order. Refused where they are of different runs, or where two answer for one
    module; a planned shard without results (or whose results were ``refused``) is said, with
    its modules, and so are shards that ran on other software."""
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
    if planned is not None:
        order = plan_order(planned)
        merged.report.targets.sort(key=lambda row: order.get(row.target, len(order)))
        if merged.changes is not None:
            merged.changes.modules.sort(key=lambda m: order.get(m.key, len(order)))
    merged.note = "" if merged.report.targets else first.note
    notes = _missing(planned, [s.shard for s in shards.values()], refused or {})
    notes += _other_software(shards)
    if merged.changes is not None:
        merged.changes.notes += notes
    elif notes:  # a manual run has no list of changes to note it in: it heads the comment
        merged.note = " ".join([merged.note, *notes]).strip()
    return merged


def _joined_changes(shards: dict[str, PullResults]) -> ChangeReport | None:
    reports = [results.changes for results in shards.values() if results.changes is not None]
    if not reports:
        return None
    joined = reports[0].model_copy(deep=True)
    joined.modules, joined.over_cap, seen = [], [], set()
    for report in reports:
        for module in report.modules:
            if module.key in seen:
                raise _refused(f"{module.key} is a changed module of two shards")
            seen.add(module.key)
            joined.modules.append(module)
    for report in reports:
        joined.over_cap += [m for m in report.over_cap if m.key not in seen]
        seen |= {m.key for m in report.over_cap}
        joined.notes += [note for note in report.notes if note not in joined.notes]
    return joined


def _missing(
    planned: Plan | None, present: list[list[str] | None], refused: dict[str, str]
) -> list[str]:
    """One note for the planned shards whose results did not come or were refused."""
    notes = [f"The results of {name} were refused: {why}." for name, why in refused.items()]
    came = {" ".join(names) for names in present if names is not None}
    lost = [shard for shard in (planned.include if planned else []) if shard.only not in came]
    lost = [shard for shard in lost if shard.only]
    if lost:
        unmeasured = [name for shard in lost for name in shard.names()]
        listed = ", ".join(unmeasured[:20]) + (
            f" and {len(unmeasured) - 20} more" if len(unmeasured) > 20 else ""
        )
        numbers = ", ".join(str(shard.shard) for shard in lost)
        notes.append(
            f"Shard{'s' if len(lost) > 1 else ''} {numbers} of {len(planned.include) if planned else 0} "
            f"left no results (failed, cancelled or refused: see the run), so "
            f"{len(unmeasured)} module(s) were not measured: {listed}."
        )
    return notes


def _other_software(shards: dict[str, PullResults]) -> list[str]:
    """A note where the shards' runners had other versions: each row names its own device and
    torch; the follow-up's headers take their torch from the row."""
    seen = {
        f"torch {r.environment.torch}, CUDA {r.environment.cuda}, kernelpilot "
        f"{r.environment.kernelpilot}"
        for r in shards.values()
    }
    if len(seen) < 2:
        return []
    return [f"The measure jobs ran on different software: {'; '.join(sorted(seen))}."]


def _refused(what: str) -> UserError:
    return UserError(
        f"the shards' results do not join: {what}",
        where="kernelpilot github merge",
        fix="merge the artifacts of one workflow run, each shard's once, planned by one plan; "
        "where that was so, a measuring job's output was tampered with",
    )


def matrix_json(planned: Plan) -> str:
    return json.dumps(planned.model_dump(mode="json"), separators=(",", ":"))
