"""``kernelpilot github gate|measure|publish``: the three jobs of the GitHub workflow (the
action calls them; a matrix of measuring jobs adds ``bot.cli.matrix``'s plan and merge). The
same flow on a local repository is ``kernelpilot review`` (``bot.cli.review``).

The action passes its inputs as environment variables (``KERNELPILOT_*``), never as text in a
shell command; each option names its variable in ``--help``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from bot.actions_io import add_summary, commands_stopped
from bot.cli.options import (
    DEVICE_ENV,
    GPUS,
    MAX_TARGETS,
    NO_COMPILE,
    SEED,
    VERBOSE,
    llm_options,
    progress,
    pull_run_options,
    run_command,
)
from bot.cli.out_dir import claim_option
from bot.cli.params import not_blank
from bot.event import ActionsEnv, Event, actions_env, load_event
from bot.github import GitHubRepo, connect
from bot.pr.flow import NIGHTLY_ELSEWHERE, gate, measure
from bot.pr.publish import publish
from bot.pr.runner_trust import refuse_fork_on_persistent_runner, runner_nature
from harness.devices import check_toolchain
from harness.errors import UserError


@click.group(name="github")
def github_group() -> None:
    """The GitHub workflow's jobs: gate, measure, publish (run inside GitHub Actions)."""


@github_group.command(name="gate")
@click.option(
    "--approval-label",
    default="kernelpilot:approved",
    show_default=True,
    envvar="KERNELPILOT_APPROVAL_LABEL",
    callback=not_blank,
    help="The label a maintainer adds to let a fork's code run [env: KERNELPILOT_APPROVAL_LABEL].",
)
@VERBOSE
def gate_command(approval_label, verbose) -> None:
    """Decide whether this pull request's code may run on the runner; writes the step outputs
    run (true/false) and sha (the commit to check out). Runs no pull-request code. A fork runs
    only after a maintainer adds the approval label, on the head of that moment; a later push
    removes the label (needs GITHUB_TOKEN with pull-requests: write)."""

    def action() -> None:
        with commands_stopped():  # the event's text is the pull request's: no command in it
            event, env = load_event(), actions_env()
            github = _repository(env, event) if env.token is not None else None
            gate(event, env, approval_label, progress, github)

    run_command(verbose, action)


@github_group.command(name="measure")
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("kernelpilot-results"),
    show_default=True, envvar="KERNELPILOT_RESULTS", callback=claim_option,
    help="Folder for results.json (the publish job's input), reports and kernels "
    "[env: KERNELPILOT_RESULTS].",
)  # fmt: skip
@click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
    show_default=True, envvar="KERNELPILOT_REPO",
    help="The checkout of the pull request's head, with its base commit [env: KERNELPILOT_REPO].",
)  # fmt: skip
@DEVICE_ENV
@click.option(
    "--targets", default="", envvar="KERNELPILOT_TARGETS",
    help="A manual run's targets, space-separated (path.py:Class or KernelBench files); the "
    "workflow_dispatch input 'targets' wins; none: every configured target "
    "[env: KERNELPILOT_TARGETS].",
)  # fmt: skip
@click.option(
    "--only", default=None, envvar="KERNELPILOT_ONLY",
    help="This job is one shard of a matrix (kernelpilot github plan): of the changed modules "
    "(a manual run: of its targets), measure only these, space-separated path.py:Class "
    "[env: KERNELPILOT_ONLY].",
)  # fmt: skip
@SEED
@NO_COMPILE
@MAX_TARGETS
@GPUS
@llm_options(env=True)
@VERBOSE
def measure_command(
    out_dir, repo, device, targets, only, seed, no_compile_baseline, max_targets, gpus,
    llm, model, script, budget, max_cost, verbose,
) -> None:  # fmt: skip
    """Optimize the modules this event asks for (a pull request's changed modules, or a manual
    run's targets) and write results.json, the job summary and the step outputs improved and
    best-speedup. Makes no write to GitHub. Output from the pull request's code cannot issue
    workflow commands."""

    def action() -> None:
        options = pull_run_options(
            device, None, out_dir, seed, no_compile_baseline, llm, model, script, budget, max_cost,
            repo, gpus,
        )  # fmt: skip
        event = load_event()
        if event.mode == "schedule":  # not a failure: nothing was asked that this version does
            click.echo(NIGHTLY_ELSEWHERE, err=True)
            add_summary(actions_env().summary_file, NIGHTLY_ELSEWHERE)
            return
        if event.dispatch is not None and not event.dispatch.targets:
            event.dispatch.targets = targets.split()
        refuse_fork_on_persistent_runner(event, runner_nature(os.environ))
        check_toolchain(options.device)
        shard = (only or "").split() or None  # empty: the whole event (a plan of nothing)
        with commands_stopped():
            results = measure(event, actions_env(), repo, options, progress, max_targets, shard)
        improved = len(results.report.improved())
        click.echo(f"{len(results.report.targets)} module(s) measured, {improved} improved")
        if any(row.status.failed for row in results.report.targets):
            sys.exit(1)

    run_command(verbose, action)


@github_group.command(name="publish")
@click.option(
    "--results", "results_dir", type=click.Path(path_type=Path),
    default=Path("kernelpilot-results"), show_default=True, envvar="KERNELPILOT_RESULTS",
    help="The measure job's results folder (its artifact) [env: KERNELPILOT_RESULTS].",
)  # fmt: skip
@click.option(
    "--open-pr/--no-open-pr", default=True, show_default=True, envvar="KERNELPILOT_OPEN_PR",
    help="Open or update the follow-up pull request with the kernels [env: KERNELPILOT_OPEN_PR].",
)  # fmt: skip
@click.option(
    "--comment-without-modules/--no-comment-without-modules", default=True, show_default=True,
    envvar="KERNELPILOT_COMMENT_WITHOUT_MODULES",
    help="Comment on a pull request that changed no nn.Module (a comment already there is "
    "always kept up to date) [env: KERNELPILOT_COMMENT_WITHOUT_MODULES].",
)  # fmt: skip
@VERBOSE
def publish_command(results_dir, open_pr, comment_without_modules, verbose) -> None:
    """Post the measure job's results: the sticky comment, review comments on the improved
    classes and the follow-up pull request (needs GITHUB_TOKEN with pull-requests: write and
    contents: write). Never imports the pull request's code. A read-only token falls back to
    the job summary; exits 1 when another write failed."""

    def action() -> None:
        with commands_stopped():  # the event's and the results' text is the pull request's
            event, env = load_event(), actions_env()
            if env.token is None:
                raise UserError(
                    "GITHUB_TOKEN is not set",
                    where="kernelpilot github publish",
                    fix="pass the github-token input (permissions: pull-requests: write, "
                    "contents: write)",
                )
            outcome = publish(
                event, env, results_dir, _repository(env, event), open_pr, progress,
                comment_without_modules,
            )  # fmt: skip
        if outcome.comment_url:
            click.echo(f"comment: {outcome.comment_url}")
        if outcome.followup_url:
            click.echo(f"follow-up pull request: {outcome.followup_url}")
        if outcome.problems:
            sys.exit(1)

    run_command(verbose, action)


def _repository(env: ActionsEnv, event: Event) -> GitHubRepo:
    """The repository the event names, through a client for the job's token: the one place the
    pull-request jobs connect to GitHub."""
    assert env.token is not None
    return GitHubRepo(connect(env.api_url, env.token.get_secret_value()), event.repository)
