"""The one runner: a list of targets in, a report out.

The command line, the pull-request flow and the nightly job all call ``run_targets``. Each
target is resolved, audited, optimized and reported on its own: a target that cannot be
resolved or fails becomes a row with its error, and the report is written after every target,
so what was measured survives whatever comes later.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agents.llm.client import LLMConfig, LLMFatalError
from agents.search.budget import RunSpend
from agents.search.config import SearchConfig, run_spend
from agents.team import TeamConfig
from agents.trajectory import Trajectory
from bot.render import write_report
from bot.report import Report, TargetReport, TargetStatus
from bot.settings import Settings, reader
from harness.builds.cache import default_cache_dir
from harness.config import EvalConfig
from harness.errors import UserError
from harness.evaluate import Evaluator, WeakSpecError
from harness.problem.load import problem_from_target, problems_from_project
from harness.records import Problem
from harness.sandbox.redact import scrub


class RunOptions(BaseModel):
    """What a run was asked for, whoever asked (CLI flags, action inputs, the nightly job)."""

    device: str = Field(description="cpu or cuda (already resolved from auto).")
    settings: Settings = Field(
        description="The project's settings, read once where the run starts (bot.settings)."
    )
    dtype: str | None = Field(default=None, description="None: float32, or the config's.")
    out_dir: Path = Field(default=Path("kernelpilot-out"), description="Where reports go.")
    seed: int | None = Field(default=None, description="Fixed correctness seeds, or random.")
    compile_baseline: bool | None = Field(
        default=None, description="Override eval.compile_baseline (None: the project's)."
    )
    time_budget_s: float | None = Field(
        default=None, description="Override eval.time_budget_s (None: the project's)."
    )
    gpus: int | None = Field(
        default=None,
        description="Override eval.gpus: a property of the machine (--gpus, KERNELPILOT_GPUS), "
        "not of the project.",
    )
    llm: str = Field(default="auto", description="auto, offline, openai or scripted.")
    model: str | None = Field(default=None, description="Override llm.model.")
    script: Path | None = Field(default=None, description="Replies for the scripted model.")
    attempts: int | None = Field(default=None, description="Override search.attempts.")
    max_cost_usd: float | None = Field(default=None, description="Override search.max_cost_usd.")
    run_max_cost_usd: float | None = Field(
        default=None, description="Override search.run_max_cost_usd (all targets of the run)."
    )
    max_seconds: float | None = Field(default=None, description="Override search.max_seconds.")
    resume: Path | None = Field(default=None, description="A trajectory to continue.")
    sandbox: Literal["bubblewrap", "off"] = Field(
        default_factory=lambda: sandbox_from_environment(os.environ),
        description="How workers that run the module's and candidates' code are isolated "
        "(KERNELPILOT_SANDBOX; never pyproject.toml, which a pull request can change).",
    )
    cache_scope: str = Field(
        default_factory=lambda: cache_scope(os.environ),
        description="The build cache's folder for this run's trust level: a pull request's "
        "builds never reach the nightly job's (from GITHUB_EVENT_NAME; local outside Actions).",
    )
    eval_config: EvalConfig | None = Field(
        default=None,
        description="The eval settings to use instead of the project's (a pull request's: its "
        "base commit's, bot.pr.base_config); the overrides above still apply.",
    )


SCOPES = {"pull_request": "pull-request", "pull_request_target": "pull-request",
          "schedule": "nightly", "workflow_dispatch": "dispatch"}  # fmt: skip


def cache_scope(environ: Mapping[str, str]) -> str:
    """Each kind of run builds into a cache of its own: ``local`` outside GitHub Actions."""
    event = environ.get("GITHUB_EVENT_NAME")
    if not event:
        return "local"
    return SCOPES.get(event, "other-events")


def sandbox_from_environment(environ: Mapping[str, str]) -> Literal["bubblewrap", "off"]:
    value = environ.get("KERNELPILOT_SANDBOX", "").strip().lower() or "bubblewrap"
    if value not in ("bubblewrap", "off"):
        raise UserError(
            f"KERNELPILOT_SANDBOX={value!r} is not a sandbox kind",
            where="the environment",
            fix="set KERNELPILOT_SANDBOX to bubblewrap (the default) or off (trusted code only)",
        )
    return value  # type: ignore[return-value]


Progress = Callable[[str], None]


def project_eval_config(options: RunOptions) -> EvalConfig:
    """The project's ``[tool.kernelpilot.eval]`` (defaults without one), with the run's
    overrides: every command verifies and times under the project's settings."""
    config = options.settings.eval if options.eval_config is None else options.eval_config
    updates: dict = {}
    if options.compile_baseline is not None:
        updates["compile_baseline"] = options.compile_baseline
    if options.time_budget_s is not None:
        if not options.time_budget_s > 0:  # nan too: the workers' own check would blame the module
            raise UserError(
                f"time budget {options.time_budget_s} is not a positive number of seconds",
                where="--time-budget",
                fix="give the seconds of timing per implementation, e.g. --time-budget 1.5",
            )
        updates["time_budget_s"] = options.time_budget_s
    if options.gpus is not None:
        updates["gpus"] = options.gpus
    updates["sandbox"] = options.sandbox
    updates["cache_dir"] = (config.cache_dir or default_cache_dir()) / options.cache_scope
    return config.model_copy(update=updates)


def resolve_targets(targets: list[str], options: RunOptions) -> list[Problem | TargetReport]:
    """Each target as a Problem, or as an error row saying why it could not be resolved.
    No target: every target the run's project configures."""
    project = options.settings.project_targets()
    if not targets:
        if project is None:
            raise UserError(
                "no target given and no pyproject.toml with [tool.kernelpilot] here or above",
                fix="pass a target (kernelpilot optimize examples/fused_gelu_block.py) or "
                "configure one",
            )
        return list(problems_from_project(project, options.device, options.dtype))
    read = reader(options.settings)  # a target's own project is read once, the run's not again
    resolved: list[Problem | TargetReport] = []
    for target in targets:
        try:
            resolved.append(problem_from_target(target, options.device, options.dtype, read))
        except UserError as err:
            folder = Path(target.partition(":")[0])
            if target.strip() and folder.is_dir():
                err = UserError(err.what, err.where, f"{err.fix}\n  or {_configured_hint(folder)}")
            resolved.append(
                TargetReport.failed(target, options.device, TargetStatus.error, err.render())
            )
    return resolved


def _configured_hint(folder: Path) -> str:
    """How to optimize a folder's configured targets, for a folder given as a target."""
    if (folder / "pyproject.toml").is_file():
        return (
            f"to optimize the [[tool.kernelpilot.targets]] of {folder / 'pyproject.toml'}, "
            f"run `kernelpilot optimize` with no target in that folder (cd {folder})"
        )
    return (
        "to optimize every module a project configures, list them as "
        "[[tool.kernelpilot.targets]] in its pyproject.toml and run `kernelpilot optimize` "
        "with no target there"
    )


def run_targets(
    targets: list[Problem | TargetReport], options: RunOptions, progress: Progress
) -> Report:
    """Optimize every resolved target; rows for the others. Writes the report as it goes."""
    from bot.proposer import run_llm

    resume = Trajectory.load(options.resume) if options.resume else None
    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**31)
    if resume is not None:
        seed = resume.seed
    settings = options.settings
    llm = run_llm(settings, options.llm, {"model": options.model, "script": options.script})
    progress(f"proposer: {'offline (no LLM)' if llm is None else f'LLM team, {llm.model}'}")
    search = settings.search_config(
        {"attempts": options.attempts, "max_cost_usd": options.max_cost_usd,
         "run_max_cost_usd": options.run_max_cost_usd, "max_seconds": options.max_seconds}
    )  # fmt: skip
    config = project_eval_config(options)
    evaluator = Evaluator(config, seed, progress=progress)
    report = Report(review_speedup=config.review_speedup)
    spend = run_spend(search)  # one per run: the run's spend caps hold over all its targets
    for number, target in enumerate(targets, 1):
        if isinstance(target, TargetReport):
            report.targets.append(target)
        else:
            progress(f"target {number}/{len(targets)}: {target.name} on {target.device}")
            run = TargetRun(
                llm=llm,
                search=search,
                team=settings.team,
                seed=seed,
                resume=resume,
                out_dir=options.out_dir,
                spend=spend,
            )
            report.targets.append(optimize_target(target, evaluator, run, progress))
            evaluator.release(target)  # its comparator's device memory, for the next target
        write_report(report, options.out_dir)  # after every target: nothing measured is lost
    return report


class TargetRun(BaseModel):
    """How one target is searched: the LLM (None: offline only), budgets, seeds."""

    model_config = {"arbitrary_types_allowed": True}

    llm: LLMConfig | None
    search: SearchConfig
    team: TeamConfig = Field(description="How the LLM team's roles are asked.")
    seed: int
    resume: Trajectory | None = None
    out_dir: Path
    spend: RunSpend = Field(description="The run's spend so far, shared by its targets.")


def optimize_target(
    problem: Problem, evaluator: Evaluator, run: TargetRun, progress: Progress
) -> TargetReport:
    """One target's row: its best verified kernel, or why there is none."""
    from agents.optimize import optimize_problem
    from bot.proposer import make_team

    resume = run.resume if run.resume and run.resume.target == problem.name else None
    try:
        floor = evaluator.config.noise_floor
        team = make_team(run.llm, run.team, problem, progress, floor) if run.llm else None
        attempt = optimize_problem(
            problem,
            evaluator,
            team,
            run.search,
            run.out_dir,
            resume,
            run.seed,
            progress,
            run.spend,
        )
    except WeakSpecError as err:
        return TargetReport.failed(
            problem.name, problem.device, TargetStatus.weak_spec, scrub(err.render())
        )
    except LLMFatalError:  # a bad key, an unknown model: no other target would fare better
        raise
    except UserError as err:  # this target's fault: report it, go on with the others
        progress(scrub(err.render()))
        return TargetReport.failed(
            problem.name, problem.device, TargetStatus.error, scrub(err.render())
        )
    if attempt.result is None or attempt.candidate is None:
        row = TargetReport.failed(
            problem.name, problem.device, TargetStatus.no_candidate, attempt.reason
        )
    else:
        kernel_file = run.out_dir / f"{problem.name}_kernel.py"
        run.out_dir.mkdir(parents=True, exist_ok=True)
        kernel_file.write_text(attempt.candidate.source)
        row = TargetReport.from_result(problem.name, attempt.result, str(kernel_file))
        row.reason = row.reason or attempt.reason
        row.kernel_source = attempt.candidate.source
        row.plan = attempt.candidate.note
    if attempt.trajectory is not None:
        row.add_search(attempt.trajectory, attempt.trajectory_file)
    return row
