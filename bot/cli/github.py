"""``kernelpilot review`` (the pull-request flow on a local repository) and ``kernelpilot
github gate|measure|publish`` (the three jobs of the GitHub workflow; the action calls them;
a matrix of measuring jobs adds ``bot.cli.matrix``'s plan and merge).

The action passes its inputs as environment variables (``KERNELPILOT_*``), never as text in a
shell command; each option names its variable in ``--help``.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path, PurePosixPath

import click

from bot.actions_io import add_summary, commands_stopped
from bot.cli.options import (
    BASE_REF,
    DEVICE,
    DEVICE_ENV,
    DTYPE,
    GPUS,
    HEAD_REF,
    NO_COMPILE,
    SEED,
    VERBOSE,
    llm_options,
    progress,
    run_command,
    run_options,
)
from bot.cli.out_dir import claim_option, claim_review_option
from bot.cli.params import not_blank
from bot.cli.targets import warn_uncommitted
from bot.event import ActionsEnv, Event, actions_env, load_event
from bot.github import GitHubRepo, connect
from bot.pr.comment import render_comment
from bot.pr.flow import DEFAULT_MAX_TARGETS, NIGHTLY_ELSEWHERE, gate, measure, review_local
from bot.pr.followup import build_followup
from bot.pr.local_followup import write_followup
from bot.pr.publish import publish
from bot.pr.results import PullResults
from bot.pr.runner_trust import refuse_fork_on_persistent_runner, runner_nature
from harness.devices import check_toolchain
from harness.errors import UserError

MAX_TARGETS = click.option(
    "--max-targets",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TARGETS,
    show_default=True,
    envvar="KERNELPILOT_MAX_TARGETS",
    help="Changed modules optimized per run; the rest are listed in the comment "
    "[env: KERNELPILOT_MAX_TARGETS].",
)


def _run_options(
    device, dtype, out_dir, seed, no_compile, llm, model, script, budget, max_cost, repo, gpus
):  # fmt: skip
    options = run_options(device, dtype, out_dir, seed, no_compile, None, start=repo.resolve(),
                          gpus=gpus)  # fmt: skip
    return options.model_copy(
        update={"llm": llm, "model": model, "script": script, "attempts": budget,
                "max_cost_usd": max_cost}
    )  # fmt: skip


@click.command()
@BASE_REF
@HEAD_REF
@click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    show_default=True,
    is_eager=True,  # read before --out, which is checked against its work tree
    help="The git repository.",
)
@DEVICE
@DTYPE
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=None,
    callback=claim_review_option,
    help="Folder for results.json, report.json, report.md, junit.xml and kernels [default: "
    "one per repository under $KERNELPILOT_CACHE or ~/.cache/kernelpilot, review/]. A folder "
    "inside the repository's work tree is refused unless git ignores it; made, checked and "
    "locked before any work.",
)  # fmt: skip
@click.option(
    "--write-followup", "followup_dir", type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Also write the follow-up pull request's files (per faster module: the verified "
    "kernel, the drop-in module and its test) under DIR at their repository paths; DIR may be "
    "the repository itself, to try them in place. A file already there with other content "
    "stops the write before anything is written, unless --force.",
    metavar="DIR",
)  # fmt: skip
@click.option(
    "--force", is_flag=True,
    help="With --write-followup: replace files already there with other content.",
)  # fmt: skip
@SEED
@NO_COMPILE
@MAX_TARGETS
@GPUS
@llm_options(env=True)
@VERBOSE
def review(
    base, head, repo, device, dtype, out_dir, followup_dir, force, seed, no_compile_baseline,
    max_targets, gpus, llm, model, script, budget, max_cost, verbose,
) -> None:  # fmt: skip
    """Run the pull-request flow locally: find the nn.Modules changed between BASE and HEAD,
    optimize them, and print the comment kernelpilot would post. Touches no GitHub, and writes
    nothing into the repository unless asked (--write-followup).

    Exits 0 when every changed module ran (a module without a faster kernel is not an error),
    1 when one failed, 2 on bad input.
    """

    def action() -> None:
        options = _run_options(
            device, dtype, out_dir, seed, no_compile_baseline, llm, model, script, budget, max_cost,
            repo, gpus,
        )  # fmt: skip
        check_toolchain(options.device)
        warn_uncommitted(repo.resolve())
        results = review_local(repo, base, head, options, progress, max_targets)
        click.echo(render_comment(results))
        click.echo(f"results.json and the reports are in {out_dir}", err=True)
        if followup_dir is not None:
            _write_followup(results, followup_dir, force)
        if any(row.status.failed for row in results.report.targets):
            sys.exit(1)

    run_command(verbose, action)


def _write_followup(results: PullResults, folder: Path, force: bool) -> None:
    followup = build_followup(results, results.test_dir)
    if followup is None:
        click.echo("--write-followup: no module got a faster kernel, no file to write", err=True)
        return
    for file in write_followup(followup, folder, force):
        click.echo(f"{file.state.value}: {folder / file.path}", err=True)
    tests = [f.path for f in followup.files if PurePosixPath(f.path).match("test_*.py")]
    click.echo(
        f"try it in a checkout of the head: cd {shlex.quote(str(folder))} && python -m pytest "
        + " ".join(shlex.quote(test) for test in tests),
        err=True,
    )


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
        options = _run_options(
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
