"""``kernelpilot optimize``, ``evaluate`` and ``audit``: the commands on a module or a
problem file, outside any pull request."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from agents.trajectory import Trajectory
from bot.cli.options import (
    BUDGET,
    DEVICE,
    DTYPE,
    GPUS,
    NO_COMPILE,
    OUT,
    SEED,
    VERBOSE,
    llm_options,
    progress,
    run_command,
    run_options,
)
from bot.render import render_terminal, write_report
from bot.report import Report, TargetReport
from bot.run import RunOptions, project_eval_config, resolve_targets, run_targets
from bot.settings import load_settings, reader
from harness.devices import check_toolchain, resolve_device
from harness.evaluate import Evaluator
from harness.files import read_user_text
from harness.problem.load import problem_from_target
from harness.records import Candidate, Problem, Status


@click.command()
@click.argument("targets", nargs=-1)
@DEVICE
@DTYPE
@OUT
@SEED
@NO_COMPILE
@BUDGET
@GPUS
@llm_options(resumable=True)
@VERBOSE
def optimize(
    targets,
    device,
    dtype,
    out_dir,
    seed,
    no_compile_baseline,
    time_budget,
    gpus,
    llm,
    model,
    script,
    budget,
    max_cost,
    max_time,
    resume,
    verbose,
) -> None:
    """Write, verify and time kernels for TARGETS.

    A target is a KernelBench-format file (Model, get_inputs, get_init_inputs) or
    path.py:ClassName configured in [tool.kernelpilot]. With no target, every target of the
    nearest pyproject.toml's [tool.kernelpilot] is optimized. Exits 0 when every target ran
    (a target without a faster kernel is not an error), 1 when a target failed, 2 on bad input.
    """

    started = time.time()

    def action() -> None:
        options = run_options(
            device, dtype, out_dir, seed, no_compile_baseline, time_budget, gpus=gpus
        )
        options = options.model_copy(
            update={"llm": llm, "model": model, "script": script, "attempts": budget,
                    "max_cost_usd": max_cost, "max_seconds": max_time, "resume": resume}
        )  # fmt: skip
        check_toolchain(options.device)
        resolved: list[Problem | TargetReport]
        if resume is not None and not targets:  # the trajectory names its target
            resolved = [Trajectory.load(resume).problem]
        else:
            resolved = resolve_targets(list(targets), options)
        unresolved = [target for target in resolved if isinstance(target, TargetReport)]
        if unresolved and len(unresolved) == len(resolved):  # nothing can run: bad input
            for row in unresolved:
                click.echo(row.reason, err=True)
            sys.exit(2)
        report = run_targets(resolved, options, progress)
        click.echo(render_terminal(report))
        click.echo(f"\nwrote {out_dir}/report.json, report.md, junit.xml")
        if any(row.status.failed for row in report.targets):
            sys.exit(1)

    run_command(verbose, action, lambda: kept_by_optimize(out_dir, started))


def kept_by_optimize(out_dir: Path, since: float) -> str:
    """What an interrupted optimize run left in ``out_dir``: the report of the targets it
    finished, and each search it saved (resumable)."""

    def written(path: Path) -> bool:
        return path.is_file() and path.stat().st_mtime >= since

    kept = [f"{out_dir / 'report.json'} holds the targets finished before"]
    if not written(out_dir / "report.json"):
        kept = ["no target had finished, so no report was written"]
    for saved in sorted(filter(written, out_dir.glob("trajectory-*.json"))):
        kept.append(f"resume its search with: kernelpilot optimize --resume {saved}")
    return "\n  ".join(kept)


@click.command()
@click.argument("problem", type=click.Path(path_type=Path))
@click.argument("candidate", type=click.Path(path_type=Path))
@DEVICE
@DTYPE
@OUT
@SEED
@NO_COMPILE
@BUDGET
@VERBOSE
def evaluate(
    problem, candidate, device, dtype, out_dir, seed, no_compile_baseline, time_budget, verbose
) -> None:
    """Verify and time a hand-written CANDIDATE (a file defining ModelNew) against PROBLEM.

    Exits 0 only if the candidate is verified correct; 1 if it is not; 2 on bad input; 3 when
    kernelpilot itself failed (a bug of ours, never the candidate's); 4 when its checks passed
    but the machine was too busy, every time it was timed, to judge its timing (run it again
    on a quieter machine).
    """

    def action() -> None:
        options = run_options(device, dtype, out_dir, seed, no_compile_baseline, time_budget)
        check_toolchain(options.device)
        spec = problem_from_target(str(problem), options.device, dtype, reader(options.settings))
        source = read_user_text(candidate, "candidate file")
        evaluator = Evaluator(project_eval_config(options), seed, progress=progress)
        result = evaluator.evaluate(spec, Candidate(source=source, origin="user"))
        report = Report(targets=[TargetReport.from_result(spec.name, result, str(candidate))])
        write_report(report, out_dir)
        click.echo(render_terminal(report))
        for check in result.checks:
            click.echo(f"  {'pass' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
        if result.log and result.status is not Status.ok:
            click.echo(f"\n--- log (end) ---\n{result.log[-2000:]}")
        codes = {Status.ok: 0, Status.harness_error: 3, Status.unjudged: 4}  # 3, 4: not its fault
        sys.exit(codes.get(result.status, 1))

    run_command(verbose, action, lambda: "the candidate was not verified and no report was written")


@click.command()
@click.argument("problem", type=click.Path(path_type=Path))
@DEVICE
@DTYPE
@SEED
@VERBOSE
def audit(problem, device, dtype, seed, verbose) -> None:
    """Check PROBLEM's input spec: would a null answer (zeros, a constant, an input, another
    seed's output) pass, and is the reference deterministic? Exits 1 when the spec is weak."""

    def action() -> None:
        from harness.problem.reference import reference_data

        settings = load_settings()
        options = RunOptions(
            device=resolve_device(device), settings=settings, dtype=dtype, seed=seed
        )
        spec = problem_from_target(str(problem), options.device, dtype, reader(settings))
        data = reference_data(spec, project_eval_config(options), seed)
        report = data.report.audit
        if not report.weak:
            click.echo(
                f"{spec.name}: spec is strong ({len(data.cases)} cases: a null answer fails them)"
            )
            return
        click.echo(f"{spec.name}: WEAK spec")
        for finding in report.findings:
            click.echo(f"  - {finding.kind}: {finding.detail}\n    fix: {finding.fix}")
        if report.strengthened_ok:
            click.echo(
                "  optimize/evaluate will use signed, rescaled inputs of the same shapes instead."
            )
        else:
            click.echo("  optimize/evaluate will refuse this problem until the spec is fixed.")
        sys.exit(1)

    run_command(verbose, action)
