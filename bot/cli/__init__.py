"""The ``kernelpilot`` command line: one group, its commands gathered here.

- ``local``: optimize, evaluate, audit (a module or a problem file, outside any pull request);
- ``targets``: the changed modules' targets (configured, or captured), frozen with --write;
- ``review``: the pull-request flow on a local repository; ``github``: the workflow's jobs,
  github gate|measure|publish; ``matrix``: github plan|merge, for a matrix of measuring jobs;
- ``nightly`` and ``nightly_jobs``: the nightly benchmark, history, and the scheduled
  workflow's github nightly-measure|nightly-publish;
- ``options``: what they share (options defined once, how a command runs and ends);
  ``params`` and ``out_dir``: checks of option values, made while the command line is read.

The command modules import ``options``, never this package's group: the commands are added to
it here, so no module of the command line imports another's commands back.
"""

from __future__ import annotations

import click

from bot.cli.github import github_group
from bot.cli.local import audit, evaluate, optimize
from bot.cli.matrix import merge_command, plan_command
from bot.cli.nightly import history, nightly
from bot.cli.nightly_jobs import nightly_measure_command, nightly_publish_command
from bot.cli.review import review
from bot.cli.targets import targets


@click.group()
@click.version_option(package_name="kernelpilot")
def main() -> None:
    """kernelpilot: verified, honestly timed kernels for PyTorch modules."""


github_group.add_command(nightly_measure_command)  # the nightly's jobs, beside the PR's
github_group.add_command(nightly_publish_command)
github_group.add_command(plan_command)  # a matrix of measuring jobs, beside the one job
github_group.add_command(merge_command)
for command in (optimize, evaluate, audit, review, targets, github_group, nightly, history):
    main.add_command(command)
