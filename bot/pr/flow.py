"""The pull-request flow in three steps, one per job of the workflow, and the local review.

- ``gate``: may this pull request's code run? (no PR code is checked out or imported)
- ``measure``: in a checkout of the approved head, detect the changed modules, optimize them,
  write ``results.json``; makes no write to GitHub (its token is read-only).
- ``publish`` (``bot.pr.publish``): from those results (untrusted), upsert the comment, the
  review and the follow-up pull request where the event and the API say; never imports the
  pull request's code.
- ``review_local``: detect and measure between two refs of a local repository and return the
  comment that would be posted (``kernelpilot review``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from bot.actions_io import add_summary, set_outputs
from bot.detect.captured import Captured, HeadCode, capture_targets, in_repository
from bot.detect.changes import ChangeReport, detect_changes
from bot.event import ActionsEnv, Event
from bot.git import checked_out_commit
from bot.pr.approval import GateDecision, decide
from bot.pr.base_config import base_settings as read_base_settings
from bot.pr.base_config import hold_to_base
from bot.pr.comment import render_comment, render_notice
from bot.pr.results import Environment, PullResults, TargetSource
from bot.pr.runner_paths import scrubbed
from bot.pr.shards import keep_shard
from bot.report import Report, TargetReport
from bot.run import Progress, RunOptions, resolve_targets, run_targets
from bot.writer import ReadOnly, RepoWriter, WriteFailed
from harness.capture.freeze import written_init
from harness.capture.records import CapturedTarget
from harness.errors import UserError
from harness.records import Problem

DEFAULT_MAX_TARGETS = 20
Written = TypeVar("Written")
NIGHTLY_ELSEWHERE = (
    "kernelpilot: a schedule event is the nightly benchmark, which the action's modes "
    "nightly-measure and nightly-publish run (examples/workflows/kernelpilot-nightly.yml; "
    "`kernelpilot nightly` locally); measure has nothing to do for it."
)


# --- gate -------------------------------------------------------------------------------------


def gate(
    event: Event,
    env: ActionsEnv,
    approval_label: str,
    progress: Progress,
    github: RepoWriter | None,
) -> GateDecision:
    """Decide whether this pull request's code may run; the step outputs written, the label
    removed and the notice posted as decided. ``github``: the repository ``event`` names (None
    without a token: then a fork's label cannot be checked, and nothing is written)."""
    writer = None
    if event.pull is not None and github is not None:
        writer = github.pull(event.pull.number)
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
    only: list[str] | None = None,
) -> PullResults:
    """Optimize what this event asks for in the checkout at ``repo``; results.json written.
    ``only``: this job is one shard of a matrix (``bot.pr.shards``): of the changed modules (a
    manual run: of its targets), only these."""
    mode = event.mode
    repo = repo.resolve()
    head = _checked_out(repo)
    results = PullResults(
        mode=mode, repository=event.repository, commit=head, run_url=env.run_url,
        environment=Environment.here(), test_dir=_test_dir(repo), shard=only,
    )  # fmt: skip
    if event.pull is not None:
        pull = event.pull
        if head != pull.head_sha:
            raise UserError(
                f"the checkout is at {head[:12]}, the approved head is {pull.head_sha[:12]}",
                where=str(repo),
                fix="check out the sha the gate job put out (actions/checkout with ref: that sha)",
            )
        _refuse_unsandboxed_fork(pull.fork, options, progress)
        results = results.model_copy(
            update={"pull_number": pull.number, "base_ref": pull.base_ref,
                    "head_ref": pull.head_ref, "fork": pull.fork, "sandbox": options.sandbox}
        )  # fmt: skip
        results.changes = detect_changes(repo, pull.base_sha, pull.head_sha, max_targets)
        if only is not None:
            keep_shard(results.changes, only)
        options, hold = _judged_by_base(results, repo, pull.base_sha, head, options)
        if results.note:  # refused to run at all: say why, measure nothing
            results.report = Report()
            return _write(results, env, repo, options.out_dir)
        captured = _captured(repo, results.changes, options, progress)
        targets = _configured(results.changes)
    else:
        dispatch = event.dispatch
        results.base_ref = event.ref
        targets = list(dispatch.targets) if dispatch else []
        if only is not None:
            targets = [target for target in targets if target in only]
            if not targets:  # no targets would mean every configured one: another shard's
                results.note = (
                    f"This shard was to measure {' '.join(only)[:300]}, which are not this "
                    "manual run's targets: the plan was made for another run."
                )
                return _write(results, env, repo, options.out_dir)
        if dispatch is not None:
            options = options.model_copy(
                update={"attempts": dispatch.budget or options.attempts,
                        "model": dispatch.model or options.model}
            )  # fmt: skip
        hold = None
        captured = []
    _optimize(results, repo, targets, options, progress, hold, captured)
    return _write(results, env, repo, options.out_dir)


def _captured(
    repo: Path, changes: ChangeReport, options: RunOptions, progress: Progress
) -> list[Captured]:
    """Targets for the changed modules nothing configures, from the repository's own tests
    or capture command (``bot.detect.captured``); the settings are the run's (a pull
    request's: its base commit's)."""
    return capture_targets(
        repo, changes, options.settings.capture, options.eval_config or options.settings.eval,
        HeadCode(repo, changes.head_sha), options.device,
        options.dtype or options.settings.dtype, progress,
    )  # fmt: skip


def _configured(changes: ChangeReport) -> list[str]:
    return [
        module.target
        for module in changes.targets()
        if module.target and module.target_source in ("config", "get_inputs")
    ]


def _judged_by_base(
    results: PullResults, repo: Path, base_sha: str, head_sha: str, options: RunOptions
) -> tuple[RunOptions, Callable[[Problem], Problem]]:
    """The base commit's eval settings for the run, and the hold that keeps each target's
    tolerance to the base's (``bot.pr.base_config``); what the head changed is recorded."""
    settings = read_base_settings(repo, base_sha, head_sha)
    results.judged_by = settings.judged
    results.note = settings.refusal
    hold = partial(hold_to_base, settings=settings, dtype_flag=options.dtype)
    base = options.settings.model_copy(update={"capture": settings.capture})
    return options.model_copy(update={"eval_config": settings.eval, "settings": base}), hold


def _optimize(
    results: PullResults,
    repo: Path,
    targets: list[str],
    options: RunOptions,
    progress: Progress,
    hold: Callable[[Problem], Problem] | None = None,
    captured: list[Captured] | None = None,
) -> None:
    captured = captured or []
    if results.changes is not None and not targets and not captured:
        results.report = Report()
        return
    resolved: list[Problem | TargetReport] = []
    if targets or results.changes is None:
        resolved = resolve_targets([f"{repo / target}" for target in targets], options)
    # What the capture saw, beside each target it made (None for the configured ones): the
    # hold may give a target a new Problem, so they are paired by place, not by identity.
    seen: list[CapturedTarget | None] = [None] * len(resolved)
    resolved += [problem for _, problem in captured]
    seen += [target for target, _ in captured]
    if hold is not None:
        resolved = [hold(item) if isinstance(item, Problem) else item for item in resolved]
    results.report = run_targets(resolved, options, progress)
    for item, capture, row in zip(resolved, seen, results.report.targets, strict=True):
        if isinstance(item, Problem):
            source = TargetSource.of(item, repo)
            if capture is not None:  # its constructor as the follow-up's test can write it
                written = written_init(capture, partial(in_repository, repo))
                if written is not None:
                    source = source.model_copy(
                        update={"init_imports": written[0], "init_call": written[1]}
                    )
            row.target = f"{source.module_path}:{source.class_name}"
            results.sources[row.target] = source
        elif isinstance(item, TargetReport) and item.target.startswith(str(repo)):
            row.target = Path(item.target).relative_to(repo).as_posix()


def _write(results: PullResults, env: ActionsEnv, repo: Path, out_dir: Path) -> PullResults:
    results = _saved(results, repo, out_dir)
    add_summary(env.summary_file, render_comment(results))
    best = results.report.best_speedup()
    set_outputs(
        env.output_file,
        {"improved": len(results.report.improved()),
         "best-speedup": f"{best:.2f}" if best is not None else ""},
    )  # fmt: skip
    return results


def _saved(results: PullResults, repo: Path, out_dir: Path) -> PullResults:
    """The results as they leave the run: the runner's paths out of every text (the one place
    they are scrubbed, ``bot.pr.runner_paths``), then saved as results.json."""
    results = scrubbed(results, repo)
    results.save(out_dir)
    return results


def _refuse_unsandboxed_fork(fork: bool, options: RunOptions, progress: Progress) -> None:
    """A pull request's code runs in the sandbox; without it (the workflow's explicit
    KERNELPILOT_SANDBOX=off) only a same-repository pull request runs, with a warning."""
    if options.sandbox != "off":
        return
    if fork:
        raise UserError(
            "refusing to run a fork's pull request without the sandbox (KERNELPILOT_SANDBOX=off)",
            where="kernelpilot github measure",
            fix="install bubblewrap on the runner and remove KERNELPILOT_SANDBOX=off: a fork's "
            "code runs only sandboxed (docs/security.md)",
        )
    progress(
        "warning: the sandbox is off (KERNELPILOT_SANDBOX=off): this pull request's code runs "
        "with the runner's files and network in reach"
    )


def _checked_out(repo: Path) -> str:
    return checked_out_commit(
        repo, why="github measure optimizes the commit checked out there (actions/checkout)"
    )


def _test_dir(repo: Path) -> str | None:
    for name in ("tests", "test"):
        if (repo / name).is_dir():
            return name
    return None


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
    captured = _captured(repo, changes, options, progress)
    _optimize(results, repo, _configured(changes), options, progress, captured=captured)
    return _saved(results, repo, options.out_dir)
