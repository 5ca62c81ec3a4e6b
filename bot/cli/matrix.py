"""``kernelpilot github plan|merge``: one run over several GPU runners (``bot.pr.shards``).

``plan`` (a job with the approved head checked out; it reads files as text and runs none of
the pull request's code) puts out the matrix of the measuring jobs; each runs ``measure`` with
its shard's ``--only``; ``merge`` (in the publishing job, before ``publish``) joins their
results folders into one. Example: examples/workflows/kernelpilot-pr-matrix.yml.
"""

from __future__ import annotations

from pathlib import Path

import click

from bot.actions_io import commands_stopped, set_outputs
from bot.cli.options import VERBOSE, run_command
from bot.detect.changes import detect_changes
from bot.event import actions_env, load_event
from bot.pr.flow import DEFAULT_MAX_TARGETS
from bot.pr.results import MAX_RESULTS_BYTES
from bot.pr.shards import MAX_SHARDS, load_shards, matrix_json, merge, plan, read_plan
from harness.errors import UserError


@click.command(name="plan")
@click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), default=Path("."),
    show_default=True, envvar="KERNELPILOT_REPO",
    help="A checkout with the pull request's head and base commits (full history); only read, "
    "never run [env: KERNELPILOT_REPO].",
)  # fmt: skip
@click.option(
    "--shards", type=click.IntRange(1, MAX_SHARDS), default=2, show_default=True,
    envvar="KERNELPILOT_SHARDS",
    help="Measuring jobs to split the run over (fewer where there are fewer modules) "
    "[env: KERNELPILOT_SHARDS].",
)  # fmt: skip
@click.option(
    "--targets", default="", envvar="KERNELPILOT_TARGETS",
    help="A manual run's targets, space-separated, as measure takes them; the "
    "workflow_dispatch input 'targets' wins [env: KERNELPILOT_TARGETS].",
)  # fmt: skip
@click.option(
    "--max-targets", type=click.IntRange(min=0), default=DEFAULT_MAX_TARGETS, show_default=True,
    envvar="KERNELPILOT_MAX_TARGETS",
    help="As measure's: the changed modules past it are not planned (each shard lists them) "
    "[env: KERNELPILOT_MAX_TARGETS].",
)  # fmt: skip
@VERBOSE
def plan_command(repo, shards, targets, max_targets, verbose) -> None:
    """Split what this event asks for (a pull request's changed modules, or a manual run's
    targets) into at most SHARDS parts, and put out the step output `matrix` (JSON for a
    measuring job's strategy.matrix: one entry a shard, its `shard` number and `only`, the
    modules for measure --only) and `shards` (their number). Runs none of the pull request's
    code."""

    def action() -> None:
        with commands_stopped():  # module names are the pull request's text
            event = load_event()
            if event.pull is not None:
                changes = detect_changes(
                    repo.resolve(), event.pull.base_sha, event.pull.head_sha, max_targets
                )
                names = [module.key for module in changes.modules]
            elif event.dispatch is not None:
                names = event.dispatch.targets or targets.split()
            else:
                raise UserError(
                    f"a {event.name} event has no modules to plan",
                    where="kernelpilot github plan",
                    fix="plan pull_request_target and workflow_dispatch runs",
                )
            planned = plan(names, shards)
            set_outputs(
                actions_env().output_file,
                {"matrix": matrix_json(planned), "shards": len(planned.include)},
            )
        for shard in planned.include:
            click.echo(
                f"shard {shard.shard}: {shard.only or '(the whole event: nothing to split)'}"
            )

    run_command(verbose, action)


@click.command(name="merge")
@click.option(
    "--shards", "shards_dir", type=click.Path(path_type=Path),
    default=Path("kernelpilot-shards"), show_default=True, envvar="KERNELPILOT_SHARDS_DIR",
    help="A folder of the measuring jobs' results folders, one each (download-artifact with a "
    "pattern and no merge-multiple) [env: KERNELPILOT_SHARDS_DIR].",
)  # fmt: skip
@click.option(
    "--out", "out_dir", type=click.Path(path_type=Path), default=Path("kernelpilot-results"),
    show_default=True, envvar="KERNELPILOT_RESULTS",
    help="Where the joined results.json goes: publish's --results [env: KERNELPILOT_RESULTS].",
)  # fmt: skip
@click.option(
    "--plan", "plan_text", default=None, envvar="KERNELPILOT_PLAN",
    help="The plan job's matrix output: a planned shard whose results are missing is said in "
    "the comment with its modules [env: KERNELPILOT_PLAN].",
)  # fmt: skip
@VERBOSE
def merge_command(shards_dir, out_dir, plan_text, verbose) -> None:
    """Join the shards' results into one results folder for publish. Each shard's results are
    checked against this run's event as publish checks one job's; results of different runs,
    or two shards answering for one module, are refused. Runs none of the pull request's
    code."""

    def action() -> None:
        with commands_stopped():  # the results' text is the pull request's
            event = load_event()
            if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
                raise UserError(
                    f"{out_dir} is there and not an empty folder",
                    where=str(out_dir),
                    fix="merge into a new folder: the joined results.json alone goes there",
                )
            planned = read_plan(plan_text, "--plan") if plan_text else None
            shards, refused = load_shards(shards_dir, event)
            merged = merge(shards, planned, refused)
            size = len(merged.model_dump_json(indent=2).encode())
            if size > MAX_RESULTS_BYTES:
                raise UserError(
                    f"the joined results are {size:,} bytes, over the {MAX_RESULTS_BYTES:,} "
                    "publish reads",
                    where=str(shards_dir),
                    fix="lower the shards' max-targets: their kernels and reports add up",
                )
            merged.save(out_dir)
        refusals = f", {len(refused)} refused (said in the comment)" if refused else ""
        click.echo(
            f"merged {len(shards)} shard(s){refusals}: {len(merged.report.targets)} module(s) "
            f"measured, into {out_dir}"
        )

    run_command(verbose, action)
