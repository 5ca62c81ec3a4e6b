"""``kernelpilot github nightly-measure`` and ``nightly-publish``: the nightly's two jobs, as the
action runs them (examples/workflows/kernelpilot-nightly.yml). ``kernelpilot nightly`` does
both in one go on a local checkout.

The measuring job runs the repository's code and holds no GitHub token: it reads the history
from its own checkout (the data branch comes with fetch-depth 0) and writes
nightly-results.json. The publishing job holds the write token and runs no repository code:
it checks those results as untrusted (``bot.nightly.results``) and writes the history, the
plots and the issue where its own settings say.
"""

from __future__ import annotations

import datetime
import sys
from pathlib import Path

import click

from bot.actions_io import commands_stopped
from bot.cli.nightly import BRANCH, _plot_url, _report, _store, _upkeep_issue
from bot.cli.options import (
    DEVICE_ENV,
    NO_COMPILE,
    SEED,
    VERBOSE,
    progress,
    run_command,
    run_options,
)
from bot.cli.out_dir import claim_option
from bot.event import actions_env, load_event
from bot.nightly.results import Expected, load_nightly_results
from bot.nightly.run import NightlyReport, measure_night, record_night
from bot.nightly.stores import GitHistory
from bot.run import project_eval_config
from harness.devices import check_toolchain
from harness.errors import UserError


@click.command(name="nightly-measure")
@click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
    show_default=True, envvar="KERNELPILOT_REPO",
    help="The checkout of the default branch, with full history (fetch-depth 0: the data branch "
    "comes with it) [env: KERNELPILOT_REPO].",
)  # fmt: skip
@DEVICE_ENV
@BRANCH
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("kernelpilot-nightly"),
    show_default=True, envvar="KERNELPILOT_RESULTS", callback=claim_option,
    help="Folder for nightly-results.json (the publish job's input), nightly.md and junit.xml "
    "[env: KERNELPILOT_RESULTS].",
)  # fmt: skip
@SEED
@NO_COMPILE
@VERBOSE
def nightly_measure_command(
    repo, device, branch, out_dir, seed, no_compile_baseline, verbose
) -> None:  # fmt: skip
    """The nightly's measuring job: measure the night as `kernelpilot nightly` does and judge it
    against the history as this checkout has it (BRANCH, else origin/BRANCH), then write
    nightly-results.json for `kernelpilot github nightly-publish`. Runs the repository's code;
    makes no request to GitHub and needs no token. Exits 1 when the night breaks (see
    `kernelpilot nightly --help`)."""

    def action() -> None:
        env = actions_env()
        options = run_options(
            device, None, out_dir, seed, no_compile_baseline, None, start=repo.resolve()
        )
        check_toolchain(options.device)
        with commands_stopped():
            results = measure_night(
                repo, options.device, GitHistory(repo.resolve(), branch).load(),
                project_eval_config(options), options.settings, progress, seed,
                env.run_url, env.repository,
            )  # fmt: skip
            results.save(out_dir)
            report = NightlyReport(commit=results.commit, night=results.night, rows=results.rows)
            _report(report, out_dir, None)
        if results.breaks_night:
            sys.exit(1)

    run_command(verbose, action)


@click.command(name="nightly-publish")
@click.option(
    "--results", "results_dir", type=click.Path(path_type=Path),
    default=Path("kernelpilot-nightly"), show_default=True, envvar="KERNELPILOT_RESULTS",
    help="The nightly measuring job's results folder (its artifact) [env: KERNELPILOT_RESULTS].",
)  # fmt: skip
@BRANCH
@click.option(
    "--issue/--no-issue", default=True, show_default=True, envvar="KERNELPILOT_NIGHTLY_ISSUE",
    help="Keep one issue up to date with the regressions, stale kernels and missing targets "
    "[env: KERNELPILOT_NIGHTLY_ISSUE].",
)  # fmt: skip
@VERBOSE
def nightly_publish_command(results_dir, branch, issue, verbose) -> None:
    """The nightly's publishing job: from the measuring job's results (untrusted: checked
    against this run's repository and commit), append the night to the history on the data
    branch BRANCH with its plots, and keep the nightly issue. Runs no repository code; needs
    GITHUB_TOKEN with contents: write and issues: write. Exits 1 when a write failed."""

    def action() -> None:
        env, event = actions_env(), load_event()
        if not event.sha:
            raise UserError("GITHUB_SHA is not set", where="kernelpilot github nightly-publish",
                            fix="run inside GitHub Actions, in the measuring job's run")  # fmt: skip
        today = datetime.datetime.now(datetime.timezone.utc).date()
        expected = Expected(repository=env.repository, commit=event.sha, today=today)
        with commands_stopped():
            results = load_nightly_results(results_dir, expected)
            for row in results.rows:  # this job's own word, not the artifact's
                row.record.run_url = env.run_url
            store = _store(None, branch)
            report = record_night(results, store)
            _report(report, None, _plot_url(branch))
            if issue:
                _upkeep_issue(store, report, _plot_url(branch))

    run_command(verbose, action)
