"""The pull-request flow in three steps, one per job of the workflow, and the local review.

- ``gate``: may this pull request's code run? (no PR code is checked out or imported)
- ``measure``: in a checkout of the approved head, detect the changed modules, optimize them,
  write ``results.json``; makes no write to GitHub (its token is read-only).
- ``publish``: from those results (untrusted: checked by ``bot.results``), upsert the comment,
  the review and the follow-up pull request; never imports the pull request's code.
- ``review_local``: detect and measure between two refs of a local repository and return the
  comment that would be posted (``kernelpilot review``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from bot.actions_io import add_summary, set_outputs
from bot.changes import ChangeReport, detect_changes
from bot.comment import render_comment, render_notice
from bot.event import ActionsEnv, Event
from bot.followup import build_followup
from bot.gate import GateDecision, decide
from bot.git import git
from bot.github import LineNote, PullWriter, ReadOnly, WriteFailed, connect, upsert_followup
from bot.report import Report, TargetReport
from bot.results import Environment, PullResults, TargetSource, load_results
from bot.run import Progress, RunOptions, resolve_targets, run_targets
from harness.errors import UserError
from harness.records import Problem

DEFAULT_MAX_TARGETS = 20
Written = TypeVar("Written")
NIGHTLY_ELSEWHERE = (
    "kernelpilot: a schedule event is the nightly benchmark, which `kernelpilot nightly` runs "
    "(the action's mode: nightly, examples/workflows/kernelpilot-nightly.yml); measure has "
    "nothing to do for it."
)


class PublishOutcome(BaseModel):
    comment_url: str | None = None
    followup_url: str | None = None
    problems: list[str] = []
    skipped: list[str] = []
    read_only: str | None = None


# --- gate -------------------------------------------------------------------------------------


def gate(event: Event, env: ActionsEnv, approval_label: str, progress: Progress) -> GateDecision:
    writer = None
    if event.pull is not None and env.token is not None:
        client = connect(env.api_url, env.token.get_secret_value())
        writer = PullWriter(client, event.repository, event.pull.number)
    permission = None
    if event.pull is not None and event.pull.fork and event.label == approval_label and writer:
        permission = writer.permission(event.sender)
    decision = decide(event, approval_label, permission)
    progress(f"gate: {'run' if decision.run else 'do not run'}: {decision.reason}")
    if writer is not None and event.pull is not None:
        try:
            if decision.remove_label:
                writer.remove_label(approval_label)
            if decision.notice:
                writer.upsert_comment(render_notice(decision.notice, event.pull.head_sha))
        except (ReadOnly, WriteFailed) as err:
            progress(f"gate: could not update the pull request: {err}")
    set_outputs(
        env.output_file,
        {"run": str(decision.run).lower(), "sha": decision.sha, "reason": decision.reason},
    )
    return decision


# --- measure ----------------------------------------------------------------------------------


def measure(
    event: Event,
    env: ActionsEnv,
    repo: Path,
    options: RunOptions,
    progress: Progress,
    max_targets: int = DEFAULT_MAX_TARGETS,
) -> PullResults:
    """Optimize what this event asks for in the checkout at ``repo``; results.json written."""
    mode = event.mode
    repo = repo.resolve()
    head = _checked_out(repo)
    results = PullResults(
        mode=mode, repository=event.repository, commit=head, run_url=env.run_url,
        environment=Environment.here(), test_dir=_test_dir(repo),
    )  # fmt: skip
    if event.pull is not None:
        pull = event.pull
        if head != pull.head_sha:
            raise UserError(
                f"the checkout is at {head[:12]}, the approved head is {pull.head_sha[:12]}",
                where=str(repo),
                fix="check out the sha the gate job put out (actions/checkout with ref: that sha)",
            )
        results = results.model_copy(
            update={"pull_number": pull.number, "base_ref": pull.base_ref,
                    "head_ref": pull.head_ref, "fork": pull.fork}
        )  # fmt: skip
        results.changes = detect_changes(repo, pull.base_sha, pull.head_sha, max_targets)
        targets = [module.target for module in results.changes.targets() if module.target]
    else:
        dispatch = event.dispatch
        results.base_ref = event.ref
        targets = list(dispatch.targets) if dispatch else []
        if dispatch is not None:
            options = options.model_copy(
                update={"attempts": dispatch.budget or options.attempts,
                        "model": dispatch.model or options.model}
            )  # fmt: skip
    _optimize(results, repo, targets, options, progress)
    _write(results, env, options.out_dir)
    return results


def _optimize(
    results: PullResults, repo: Path, targets: list[str], options: RunOptions, progress: Progress
) -> None:
    if results.changes is not None and not targets:
        results.report = Report()
        return
    resolved = resolve_targets([f"{repo / target}" for target in targets], options, start=repo)
    results.report = run_targets(resolved, options, progress)
    for item, row in zip(resolved, results.report.targets, strict=True):
        if isinstance(item, Problem):
            source = TargetSource.of(item, repo)
            row.target = f"{source.module_path}:{source.class_name}"
            results.sources[row.target] = source
        elif isinstance(item, TargetReport) and item.target.startswith(str(repo)):
            row.target = Path(item.target).relative_to(repo).as_posix()


def _write(results: PullResults, env: ActionsEnv, out_dir: Path) -> None:
    results.save(out_dir)
    add_summary(env.summary_file, render_comment(results))
    best = results.report.best_speedup()
    set_outputs(
        env.output_file,
        {"improved": len(results.report.improved()),
         "best-speedup": f"{best:.2f}" if best is not None else ""},
    )  # fmt: skip


def _checked_out(repo: Path) -> str:
    return git(repo, ["rev-parse", "--verify", "HEAD^{commit}"]).decode().strip()


def _test_dir(repo: Path) -> str | None:
    for name in ("tests", "test"):
        if (repo / name).is_dir():
            return name
    return None


# --- publish ----------------------------------------------------------------------------------


def publish(
    event: Event,
    env: ActionsEnv,
    results_dir: Path,
    open_pr: bool,
    progress: Progress,
    comment_without_modules: bool = True,
) -> PublishOutcome:
    """Post what the measuring job found. A read-only token falls back to the job summary.
    A pull request that changed no module gets the short comment only if asked
    (``comment_without_modules``) or if it had a comment already (it changed modules before)."""
    results = load_results(results_dir, event)
    if event.dispatch is not None:
        open_pr = open_pr and event.dispatch.open_pr
    results.run_url = env.run_url or results.run_url  # this job's own word, not the artifact's
    if env.token is None:
        raise UserError(
            "GITHUB_TOKEN is not set",
            where="kernelpilot github publish",
            fix="pass the github-token input (permissions: pull-requests: write, contents: write)",
        )
    client = connect(env.api_url, env.token.get_secret_value())
    outcome = PublishOutcome()
    followup = build_followup(results, results.test_dir) if open_pr else None
    if followup is not None:
        into = results.base_ref if results.fork or not results.head_ref else results.head_ref
        outcome.followup_url = _attempt(
            outcome,
            lambda: upsert_followup(client, event.repository, into, results.commit, followup),
        )
    body = render_comment(results, outcome.followup_url)
    if event.pull is not None:
        writer = PullWriter(client, event.repository, event.pull.number)
        quiet = not comment_without_modules and not (results.changes and results.changes.modules)
        outcome.comment_url = _attempt(outcome, lambda: writer.upsert_comment(body, not quiet))
        notes = review_notes(results, outcome.followup_url)
        if notes and outcome.read_only is None:
            skipped = _attempt(outcome, lambda: writer.upsert_review(notes, results.commit))
            outcome.skipped += skipped or []
    summary = body
    if outcome.read_only:
        summary = (
            f"> **kernelpilot could not write to the pull request**: {outcome.read_only}. "
            "This happens on a fork's `pull_request` run, whose token is read-only; the results "
            "are below. Use the workflow from examples/workflows (pull_request_target with an "
            "approval label) to get the comment and the follow-up pull request.\n\n" + body
        )
    add_summary(env.summary_file, summary)
    set_outputs(env.output_file, {"followup-pr-url": outcome.followup_url or ""})
    for line in outcome.skipped:
        progress(f"publish: no review comment: {line}")
    if outcome.read_only:
        progress(f"publish: {outcome.read_only}")
    for problem in outcome.problems:
        progress(f"publish: {problem}")
    return outcome


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
        if module is None:
            continue
        versus = (
            f" ({row.speedup_vs_compile:.2f}x vs torch.compile)"
            if row.speedup_vs_compile is not None
            else ""
        )
        link = f" Kernel and test: {followup_url}." if followup_url else ""
        notes.append(
            LineNote(
                key=row.target,
                path=module.path,
                line=module.class_line,
                body=f"⚡ kernelpilot: a verified kernel for `{module.class_name}` runs "
                f"{row.speedup_vs_eager or 0:.2f}x faster than eager{versus} on "
                f"{row.device_name or row.device}.{link}",
            )
        )
    return notes


# --- local ------------------------------------------------------------------------------------


def review_local(
    repo: Path, base: str, head: str, options: RunOptions, progress: Progress,
    max_targets: int = DEFAULT_MAX_TARGETS,
) -> PullResults:  # fmt: skip
    """The pull-request flow between two refs of a local repository, touching no GitHub."""
    repo = repo.resolve()
    changes: ChangeReport = detect_changes(repo, base, head, max_targets)
    if changes.head_sha != _checked_out(repo):
        raise UserError(
            f"{head} is {changes.head_sha[:12]}, but the work tree is at {_checked_out(repo)[:12]}",
            where=str(repo),
            fix=f"check out {head} first: kernelpilot runs the modules as they are in the work tree",
        )
    results = PullResults(
        mode="pull_request", repository=repo.name, commit=changes.head_sha, changes=changes,
        environment=Environment.here(), test_dir=_test_dir(repo),
    )  # fmt: skip
    progress(
        f"{len(changes.files)} changed .py files, {len(changes.targets())} module(s) to optimize"
    )
    targets = [module.target for module in changes.targets() if module.target]
    _optimize(results, repo, targets, options, progress)
    results.save(options.out_dir)
    return results
