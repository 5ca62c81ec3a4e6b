"""``kernelpilot review``: the pull-request flow on a local repository (no GitHub), its comment
printed, and the follow-up pull request's files written where asked. The same flow's jobs on
GitHub are ``bot.cli.github``'s.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path, PurePosixPath

import click

from bot.cli.options import (
    BASE_REF,
    DEVICE,
    DTYPE,
    GPUS,
    HEAD_REF,
    MAX_TARGETS,
    NO_COMPILE,
    SEED,
    VERBOSE,
    llm_options,
    progress,
    pull_run_options,
    run_command,
)
from bot.cli.out_dir import claim_review_option
from bot.cli.targets import warn_uncommitted
from bot.pr.comment import render_comment
from bot.pr.flow import review_local
from bot.pr.followup import build_followup
from bot.pr.local_followup import write_followup
from bot.pr.results import PullResults
from harness.devices import check_toolchain


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
        options = pull_run_options(
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
