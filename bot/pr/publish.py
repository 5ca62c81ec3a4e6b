"""The publishing job: post what the measuring job found, trusting only the event and GitHub.

The results (``bot.pr.results``) were written by a job that ran the pull request's code: they are
checked as untrusted input, their kernels are gated again and every string in them is rendered
as data (``bot.pr.trust``, ``bot.markdown``). Where publish writes (the pull request, the follow-up
branch and its parent commit, the branch it targets) comes from the event and the API only
(``bot.pr.trust.followup_place``); a fork's pull request gets its kernel as a patch in the comment,
never a branch. Publish never checks out or imports the pull request's code, and writes only
through the ``bot.writer.RepoWriter`` it is handed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from bot import markdown as md
from bot.actions_io import add_summary, set_outputs
from bot.event import ActionsEnv, Event
from bot.pr.base_config import ROOT_PYPROJECT, review_speedup
from bot.pr.comment import render_comment
from bot.pr.followup import Followup, build_followup
from bot.pr.results import PullResults, load_results
from bot.pr.trust import check_import_path, flag_claims, followup_place, kernel_reasons, vet_kernels
from bot.run import Progress
from bot.writer import REVIEW_KEY, LineNote, ReadOnly, RepoWriter, WriteFailed

Written = TypeVar("Written")


class PublishOutcome(BaseModel):
    comment_url: str | None = None
    followup_url: str | None = None
    problems: list[str] = []
    skipped: list[str] = []
    read_only: str | None = None
    refused: list[str] = []  # kernels the gates refused in publish
    no_followup: str = ""  # why no follow-up branch was pushed although one was asked for


def publish(
    event: Event,
    env: ActionsEnv,
    results_dir: Path,
    github: RepoWriter,
    open_pr: bool,
    progress: Progress,
    comment_without_modules: bool = True,
) -> PublishOutcome:
    """Post what the measuring job found. A read-only token falls back to the job summary.
    A pull request that changed no module gets the short comment only if asked
    (``comment_without_modules``) or if it had a comment already (it changed modules before).
    ``github``: the repository ``event`` names, written through."""
    results = load_results(results_dir, event)
    if event.dispatch is not None:
        open_pr = open_pr and event.dispatch.open_pr
    results.run_url = env.run_url  # this job's own run, never the artifact's word
    check_import_path(results_dir)
    outcome = PublishOutcome(refused=vet_kernels(results))
    writer = github.pull(event.pull.number) if event.pull else None
    if writer is not None and event.pull is not None:
        base = event.pull.base_sha
        raw = writer.file_at(ROOT_PYPROJECT, base)
        flag_claims(
            results, review_speedup(raw, f"{ROOT_PYPROJECT} at the base commit {base[:12]}")
        )
    place = followup_place(event, writer.facts() if writer else None)
    followup = _vetted_followup(results, outcome) if open_pr else None
    unpushed = None
    if followup is not None and place.into is None:
        outcome.no_followup = place.why_not
        unpushed = followup if place.fork else None
    elif followup is not None and place.into is not None and place.parent is not None:
        into, parent = place.into, place.parent
        outcome.followup_url = _attempt(
            outcome, lambda: github.upsert_followup(into, parent, followup)
        )
    body = render_comment(results, outcome.followup_url, unpushed, outcome.no_followup)
    if writer is not None:
        quiet = not comment_without_modules and not (results.changes and results.changes.modules)
        outcome.comment_url = _attempt(outcome, lambda: writer.upsert_comment(body, not quiet))
        notes = review_notes(results, outcome.followup_url)
        if notes and outcome.read_only is None:
            skipped = _attempt(outcome, lambda: writer.upsert_review(notes, results.commit))
            outcome.skipped += skipped or []
    _report(outcome, env, body, progress)
    return outcome


def _vetted_followup(results: PullResults, outcome: PublishOutcome) -> Followup | None:
    """The follow-up's files, each kernel file gated again as it would be pushed (header
    included); None when there is nothing to offer or a file fails (then a problem)."""
    followup = build_followup(results, results.test_dir)
    if followup is None:
        return None
    for file in followup.files:
        if file.reference_class is None:
            continue
        reasons = kernel_reasons(file.content, file.reference_class, file.dtype)
        if reasons:
            outcome.problems.append(f"the follow-up's {file.path} fails the gate: {reasons}")
            return None
    return followup


def _report(outcome: PublishOutcome, env: ActionsEnv, body: str, progress: Progress) -> None:
    summary = body
    if outcome.read_only:
        summary = (
            f"> **kernelpilot could not write to the pull request**: {md.plain(outcome.read_only)}."
            " This happens on a fork's `pull_request` run, whose token is read-only; the results "
            "are below. Use the workflow from examples/workflows (pull_request_target with an "
            "approval label) to get the comment and the follow-up pull request.\n\n" + body
        )
    add_summary(env.summary_file, summary)
    set_outputs(env.output_file, {"followup-pr-url": outcome.followup_url or ""})
    for line in outcome.refused:
        progress(f"publish: kernel refused: {line}")
    if outcome.no_followup:
        progress(f"publish: no follow-up pull request: {outcome.no_followup}")
    for line in outcome.skipped:
        progress(f"publish: no review comment: {line}")
    if outcome.read_only:
        progress(f"publish: {outcome.read_only}")
    for problem in outcome.problems:
        progress(f"publish: {problem}")


def _attempt(outcome: PublishOutcome, write: Callable[[], Written]) -> Written | None:
    """One write, its result; a read-only token or a refused write is noted (None), and the
    others still run."""
    try:
        return write()
    except ReadOnly as err:
        outcome.read_only = outcome.read_only or str(err)
    except WriteFailed as err:
        outcome.problems.append(str(err))
    return None


def review_notes(results: PullResults, followup_url: str | None) -> list[LineNote]:
    """One review comment per improved module, on its class line."""
    if results.changes is None:
        return []
    modules = {module.target: module for module in results.changes.modules if module.target}
    notes = []
    for row in results.report.improved():
        module = modules.get(row.target)
        if module is None or not REVIEW_KEY.fullmatch(row.target):
            continue
        versus = (
            f" ({md.number(row.speedup_vs_compile, '.2f', 'x')} vs torch.compile)"
            if row.speedup_vs_compile is not None
            else ""
        )
        link = f" Kernel and test: {followup_url}." if followup_url else ""
        notes.append(
            LineNote(
                key=row.target,
                path=module.path,
                line=module.class_line,
                body=f"⚡ kernelpilot: a verified kernel for {md.code(module.class_name)} runs "
                f"{md.number(row.speedup_vs_eager or 0, '.2f', 'x')} faster than eager{versus} "
                f"on {md.plain(row.device_name or row.device, 100)}.{link}",
            )
        )
    return notes
