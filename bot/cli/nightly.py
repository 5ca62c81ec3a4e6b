"""``kernelpilot nightly`` (re-verify and time the shipped kernels, time the configured targets
that ship none, record the night, judge it)
and ``kernelpilot history`` (a benchmark's recorded nights)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click

from bot.actions_io import add_summary, commands_stopped
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
from bot.cli.params import not_blank
from bot.event import actions_env
from bot.git import check_repository
from bot.nightly.history import DEFAULT_BRANCH, FOLDER, file_of, parse_lines, plot_of
from bot.nightly.plot import plot_png
from bot.nightly.run import (
    NightlyReport,
    check_checkout,
    render_junit,
    render_table,
    run_nightly,
)
from bot.nightly.stores import HistoryStore, LocalStore
from bot.run import project_eval_config
from harness.devices import check_toolchain
from harness.errors import UserError
from harness.files import output_folder

REPO = click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
    show_default=True, help="The checkout (the default branch, with full history).",
)  # fmt: skip
BRANCH = click.option(
    "--branch", default=DEFAULT_BRANCH, show_default=True, envvar="KERNELPILOT_DATA_BRANCH",
    callback=not_blank, help="The data branch holding the history [env: KERNELPILOT_DATA_BRANCH].",
)  # fmt: skip
HISTORY_DIR = click.option(
    "--history-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help="Keep the history in this local folder instead of the data branch on GitHub.",
)  # fmt: skip


@click.command()
@REPO
@DEVICE_ENV
@BRANCH
@HISTORY_DIR
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("kernelpilot-nightly"),
    show_default=True, callback=claim_option,
    help="Folder for nightly.md, nightly.json and junit.xml; made and checked before any work.",
)  # fmt: skip
@click.option(
    "--issue/--no-issue", default=True, show_default=True,
    help="With the history on GitHub: keep one issue up to date with the regressions and stale "
    "kernels (opened, edited, closed when they are gone).",
)  # fmt: skip
@SEED
@NO_COMPILE
@VERBOSE
def nightly(
    repo, device, branch, history_dir, out_dir, issue, seed, no_compile_baseline, verbose
) -> None:
    """Benchmark the repository every night: re-verify and time every kernel it ships (files
    whose first line is '# kernelpilot-verified: path.py:Class') against eager and
    torch.compile, and time eager and torch.compile of every configured target
    ([[tool.kernelpilot.targets]]) that ships no kernel. Record the night in the history and
    judge it against the nights before (thresholds: [tool.kernelpilot.nightly]). A kernel
    whose class changed since it was verified is reported stale, with the commit that changed
    it; a configured target whose file or class is gone is reported missing.

    The history is the data branch on GitHub (GITHUB_TOKEN and GITHUB_REPOSITORY set, as in
    Actions; GITHUB_API_URL for GitHub Enterprise), or --history-dir. Exits 1 when a kernel is
    stale or fails verification, a target is missing or fails to run, or either got slower
    past the fail level; an alert alone exits 0.
    """

    def action() -> None:
        check_checkout(repo.resolve())  # before the history store, which may be on GitHub
        options = run_options(
            device, None, out_dir, seed, no_compile_baseline, None, start=repo.resolve()
        )
        check_toolchain(options.device)
        store = _store(history_dir, branch)
        with commands_stopped():
            report = run_nightly(
                repo, options.device, store, project_eval_config(options), options.settings,
                progress, seed,
            )  # fmt: skip
        on_github = isinstance(store, HistoryStore)
        _report(report, out_dir, _plot_url(branch) if on_github else None)
        if issue and on_github:
            _upkeep_issue(store, report, _plot_url(branch))
        if any(row.breaks_night for row in report.rows):
            sys.exit(1)

    run_command(verbose, action)


def _report(report: NightlyReport, out_dir: Path | None, plot_url) -> None:
    """nightly.md, nightly.json, junit.xml in ``out_dir`` if given, and the job summary; the
    table printed."""
    table = render_table(report, plot_url)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "nightly.md").write_text(table)
        (out_dir / "nightly.json").write_text(report.model_dump_json(indent=2))
        (out_dir / "junit.xml").write_text(render_junit(report))
    if os.environ.get("GITHUB_STEP_SUMMARY"):
        add_summary(Path(os.environ["GITHUB_STEP_SUMMARY"]), table)
    click.echo(table)


def _upkeep_issue(store: HistoryStore, report: NightlyReport, plot_url) -> None:
    from bot.github import ReadOnly, WriteFailed
    from bot.nightly.issue import upkeep_issue

    assert store.client is not None
    try:  # the night is recorded and reported already: a refused issue write is said
        url = upkeep_issue(store.client, store.repo, report, plot_url)
    except (ReadOnly, WriteFailed) as err:
        click.echo(f"nightly issue not updated: {err}", err=True)
        sys.exit(1)
    if url:
        click.echo(f"nightly issue: {url}", err=True)


def _plot_url(branch: str):
    """A plot on the data branch as GitHub shows it (in the issue and the job summary)."""
    env = actions_env()
    return lambda benchmark: (
        f"{env.server_url}/{env.repository}/blob/{branch}/{plot_of(benchmark)}?raw=true"
    )


def _store(history_dir: Path | None, branch: str):
    if history_dir is not None:
        return LocalStore(history_dir)
    if not (os.environ.get("GITHUB_TOKEN") and os.environ.get("GITHUB_REPOSITORY")):
        raise UserError(
            "no history to write to: GITHUB_TOKEN and GITHUB_REPOSITORY are not set",
            fix="run in GitHub Actions (contents: write), or give --history-dir FOLDER",
        )
    from bot.github import connect

    env = actions_env()
    assert env.token is not None
    client = connect(env.api_url, env.token.get_secret_value())
    return HistoryStore(client.get_repo(env.repository), branch, client)


@click.command()
@click.argument("benchmark", callback=not_blank)
@REPO
@BRANCH
@HISTORY_DIR
@click.option(
    "--plot", "plot_file", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Write the series as a PNG here [default: <benchmark>.png].",
)  # fmt: skip
@VERBOSE
def history(benchmark, repo, branch, history_dir, plot_file, verbose) -> None:
    """Print BENCHMARK's recorded nights ('kernel:path_kernelpilot.py', or 'target:path.py:Class'
    for a configured target without a shipped kernel; the prefix may be left out), from
    --history-dir or from the data branch of the local repository (BRANCH, else
    origin/BRANCH), and write its plot."""

    def action() -> None:
        nonlocal benchmark
        benchmark = benchmark_name(benchmark)
        path = file_of(benchmark)
        text = _read_history(path, repo, branch, history_dir)
        records, problems = parse_lines(path, text)
        click.echo(f"{benchmark}: {len(records)} night(s)")
        click.echo(f"{'night':<11} {'commit':<12} {'status':<8} {'kernel ms':>10} {'iqr ms':>9} "
                   f"{'eager ms':>10} {'compile ms':>10}  setup")  # fmt: skip
        for r in records:
            click.echo(f"{r.night:<11} {r.commit[:12]:<12} {r.status:<8} {_ms(r.time_ms):>10} "
                       f"{_ms(r.iqr_ms if r.has_kernel else None):>9} {_ms(r.eager_ms):>10} "
                       f"{_ms(r.compile_ms):>10}  {r.setup}")  # fmt: skip
        for problem in problems:
            click.echo(f"unreadable: {problem.path}:{problem.line}: {problem.error}", err=True)
        target = plot_file or Path(Path(plot_of(benchmark)).name)
        output_folder(target.parent, "--plot's folder")
        target.write_bytes(plot_png(benchmark, records))
        click.echo(f"wrote {target}")

    run_command(verbose, action)


def benchmark_name(given: str) -> str:
    """A benchmark as the history names it: 'kernel:...' and 'target:...' as given; a shipped
    kernel's file or a configured target ('path.py:Class') as typed from the config."""
    if given.startswith(("kernel:", "target:")):
        return given
    if given.endswith("_kernelpilot.py"):
        return f"kernel:{given}"
    return f"target:{given}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _read_history(path: str, repo: Path, branch: str, history_dir: Path | None) -> str:
    if history_dir is not None:
        file = history_dir / path
        if not file.is_file():
            raise UserError("no history for this benchmark", where=str(file),
                            fix=f"list {history_dir / FOLDER} for the benchmarks recorded")  # fmt: skip
        return file.read_text(errors="replace")
    check_repository(
        repo,
        why=f"history reads the nights from the data branch {branch} of the repository "
        "(or give --history-dir FOLDER)",
    )
    for ref in (branch, f"origin/{branch}"):
        done = subprocess.run(
            ["git", "show", "--end-of-options", f"{ref}:{path}"],
            cwd=repo,
            capture_output=True,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.decode(errors="replace")
    raise UserError(
        f"no {path} on {branch} or origin/{branch}",
        where=str(repo),
        fix=f"git fetch origin {branch}, or give --history-dir",
    )
