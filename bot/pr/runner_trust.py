"""May a fork's pull-request code run on this runner? Only on one that is fresh for the job.

A runner that outlives its job keeps what the job left behind: processes, files in its home,
tool cache and build cache, changes to the runner itself. A fork's code run there could wait for
the next job, whose secrets and tokens it would then see (GitHub's guidance: self-hosted runners
for public repositories only when ephemeral). So ``kernelpilot github measure`` refuses a
fork's pull request unless the runner is ephemeral.

What the job can know of its runner: ``RUNNER_ENVIRONMENT`` is ``github-hosted`` (a fresh
virtual machine per job) or ``self-hosted``, set by the runner from the service. Whether a
self-hosted runner was registered with ``--ephemeral`` is not told to the job: the runner keeps
it in its ``.runner`` settings file, which the job could read but, on a runner that is not
ephemeral, an earlier job could have rewritten. So for a self-hosted runner the workflow
declares it (the action's input ``ephemeral-runner: true``, KERNELPILOT_EPHEMERAL_RUNNER), as
the one who registered the runner knows.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel

from bot.event import Event
from harness.errors import UserError

DECLARED = "KERNELPILOT_EPHEMERAL_RUNNER"


class RunnerNature(BaseModel):
    environment: str = ""  # RUNNER_ENVIRONMENT: github-hosted, self-hosted, or unknown ("")
    name: str = ""  # RUNNER_NAME
    declared_ephemeral: bool = False

    @property
    def ephemeral(self) -> bool:
        return self.environment == "github-hosted" or self.declared_ephemeral


def runner_nature(environ: Mapping[str, str]) -> RunnerNature:
    declared = environ.get(DECLARED, "").strip().lower()
    if declared not in ("", "true", "false"):
        raise UserError(
            f"{DECLARED}={environ[DECLARED]!r} is neither true nor false",
            where="the action's input ephemeral-runner",
            fix="set ephemeral-runner: true only for a runner registered with --ephemeral",
        )
    return RunnerNature(
        environment=environ.get("RUNNER_ENVIRONMENT", ""),
        name=environ.get("RUNNER_NAME", ""),
        declared_ephemeral=declared == "true",
    )


def refuse_fork_on_persistent_runner(event: Event, runner: RunnerNature) -> None:
    """Raise for a fork's pull request on a runner not known to be ephemeral."""
    if event.pull is None or not event.pull.fork or runner.ephemeral:
        return
    raise UserError(
        f"refusing to run the code of pull request #{event.pull.number} from the fork "
        f"{event.pull.head_repo} on a runner that is not known to be ephemeral: what it leaves "
        "behind would meet the next job's secrets",
        where=f"runner {runner.name or '?'} (RUNNER_ENVIRONMENT={runner.environment or 'unset'}, "
        f"ephemeral-runner not true)",
        fix="register the runner with --ephemeral (one job, then a fresh machine) and set "
        "ephemeral-runner: true on the measure step (README: Runners), or measure on a "
        "GitHub-hosted runner",
    )
