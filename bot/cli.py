"""The ``kernelpilot`` command line: optimize, evaluate, audit (and, from ``bot.cli_github``,
review and github gate|measure|publish)."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from agents.trajectory import Trajectory
from bot.out_dir import claim_option
from bot.render import render_terminal, write_report
from bot.report import Report, TargetReport
from bot.run import RunOptions, project_eval_config, resolve_targets, run_targets
from bot.team import project
from harness import lifetime
from harness.devices import check_toolchain, resolve_device
from harness.errors import HarnessError, UserError
from harness.evaluate import Evaluator
from harness.files import read_user_text
from harness.problem import problem_from_target
from harness.records import Candidate, Problem, Status
from harness.redact import scrub

DEVICE = click.option(
    "--device",
    type=click.Choice(["auto", "cpu", "cuda"]),
    default="auto",
    show_default=True,
    help="Where kernels run: auto takes [tool.kernelpilot] device, and picks cuda when a GPU is "
    "visible if that is auto too.",
)
# The same, also read from the environment: the action's jobs set it (github measure, nightly).
DEVICE_ENV = click.option(
    "--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True,
    envvar="KERNELPILOT_DEVICE",
    help="Where kernels run: auto takes the project's device setting, then cuda if a GPU is "
    "visible [env: KERNELPILOT_DEVICE].",
)  # fmt: skip
DTYPE = click.option(
    "--dtype",
    type=click.Choice(["float32", "float16", "bfloat16"]),
    default=None,
    help="Dtype of parameters and float inputs [default: float32, or the config's].",
)
OUT = click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    default=Path("kernelpilot-out"),
    show_default=True,
    callback=claim_option,
    help="Folder for report.json, report.md, junit.xml and kernels; made and checked before "
    "any work, and locked while the run writes to it (one run per folder at a time).",
)
SEED = click.option(
    "--seed",
    type=int,
    default=None,
    help="Fix the correctness seeds (default: random). Timing inputs are always drawn afresh.",
)
VERBOSE = click.option("--verbose", is_flag=True, help="Show tracebacks on errors.")
NO_COMPILE = click.option(
    "--no-compile-baseline",
    is_flag=True,
    help="Skip timing torch.compile (it can take minutes on cpu).",
)
BUDGET = click.option(
    "--time-budget",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds of timing per implementation [default: 1.5].",
)


LLM_OPTIONS = [
    click.option(
        "--llm",
        type=click.Choice(["auto", "offline", "openai", "scripted"]),
        default="auto",
        show_default=True,
        help="Who proposes kernels: auto uses the LLM team when an endpoint is configured "
        "(OPENAI_API_KEY or OPENAI_BASE_URL, or [tool.kernelpilot.llm]), else the offline "
        "proposer; scripted replays --script.",
    ),
    click.option("--model", default=None, help="LLM model name [default: llm.model, gpt-4.1]."),
    click.option(
        "--script",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Replies for --llm scripted (a JSON list; see agents/llm/scripted.py).",
    ),
    click.option(
        "--budget",
        type=click.IntRange(min=1),
        default=None,
        help="Candidates to try per target [default: search.attempts, 30].",
    ),
    click.option(
        "--max-cost",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Stop a target's search at this LLM cost (USD) [default: search.max_cost_usd, 5].",
    ),
    click.option(
        "--max-time",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="Stop a target's search after these seconds, LLM calls and candidates' runs cut "
        "short where they are.",
    ),
    click.option(
        "--resume",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        default=None,
        help="Continue the search saved in a trajectory-*.json (its target, seeds and tree).",
    ),
]


def llm_options(command):
    for option in reversed(LLM_OPTIONS):
        command = option(command)
    return command


def _progress(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def _run(verbose: bool, action, interrupted: Callable[[], str] | None = None) -> None:
    """Run a command as the process's run (``harness.lifetime``): whatever ends it, every
    worker is killed and every scratch folder removed before it exits.

    User errors print what/where/fix and exit 2 (traceback with --verbose). An interrupt
    (Ctrl-C, SIGTERM, SIGHUP) prints what the command kept, ``interrupted()``, and exits 128 +
    the signal. Anything else is kernelpilot's own failure: its traceback and exit 3."""
    try:
        with lifetime.stopping_cleanly():
            action()
    except UserError as err:
        if verbose:
            traceback.print_exc()
        click.echo(scrub(err.render()), err=True)
        sys.exit(2)
    except (click.ClickException, click.exceptions.Exit, click.Abort):
        raise
    except KeyboardInterrupt as err:
        kept = interrupted() if interrupted else "what it wrote before is kept"
        click.echo(f"\ninterrupted: every worker was stopped; {kept}", err=True)
        sys.exit(err.exit_code if isinstance(err, lifetime.Interrupted) else 130)
    except Exception as err:  # noqa: BLE001 - the last word on a failure no one else caught
        # A worker's own failure already holds the worker's traceback; ours is of no use then.
        shown = str(err) if isinstance(err, HarnessError) else traceback.format_exc()
        click.echo(scrub(shown), err=True)
        click.echo(
            "error: kernelpilot failed (this is a kernelpilot bug, not your module's or a "
            "candidate's)\n  fix: report it with the traceback above at "
            "https://github.com/kernelpilot/kernelpilot/issues",
            err=True,
        )
        sys.exit(3)


@click.group()
@click.version_option(package_name="kernelpilot")
def main() -> None:
    """kernelpilot: verified, honestly timed kernels for PyTorch modules."""


@main.command()
@click.argument("targets", nargs=-1)
@DEVICE
@DTYPE
@OUT
@SEED
@NO_COMPILE
@BUDGET
@llm_options
@VERBOSE
def optimize(
    targets,
    device,
    dtype,
    out_dir,
    seed,
    no_compile_baseline,
    time_budget,
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
        options = _options(device, dtype, out_dir, seed, no_compile_baseline, time_budget)
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
        report = run_targets(resolved, options, _progress)
        click.echo(render_terminal(report))
        click.echo(f"\nwrote {out_dir}/report.json, report.md, junit.xml")
        if any(row.status not in ("ok", "no_candidate") for row in report.targets):
            sys.exit(1)

    _run(verbose, action, lambda: kept_by_optimize(out_dir, started))


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


def _options(device, dtype, out_dir, seed, no_compile: bool, budget, start=None) -> RunOptions:
    """The run's options; ``--device auto`` defers to the project's ``device`` setting (which is
    itself auto by default), found from ``start`` (default: here)."""
    if device == "auto":
        device = project(start)[0].device
    return RunOptions(
        device=resolve_device(device),
        project_dir=start,
        dtype=dtype,
        out_dir=out_dir,
        seed=seed,
        compile_baseline=False if no_compile else None,
        time_budget_s=budget,
    )


@main.command()
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
    kernelpilot itself failed (a bug of ours, never the candidate's).
    """

    def action() -> None:
        options = _options(device, dtype, out_dir, seed, no_compile_baseline, time_budget)
        check_toolchain(options.device)
        spec = problem_from_target(str(problem), options.device, dtype)
        source = read_user_text(candidate, "candidate file")
        evaluator = Evaluator(project_eval_config(options), seed, progress=_progress)
        result = evaluator.evaluate(spec, Candidate(source=source, origin="user"))
        report = Report(targets=[TargetReport.from_result(spec.name, result, str(candidate))])
        write_report(report, out_dir)
        click.echo(render_terminal(report))
        for check in result.checks:
            click.echo(f"  {'pass' if check.passed else 'FAIL'}  {check.name}: {check.detail}")
        if result.log and result.status.value != "ok":
            click.echo(f"\n--- log (end) ---\n{result.log[-2000:]}")
        failed = 3 if result.status is Status.harness_error else 1  # ours, not the candidate's
        sys.exit(0 if result.status is Status.ok else failed)

    _run(verbose, action, lambda: "the candidate was not verified and no report was written")


@main.command()
@click.argument("problem", type=click.Path(path_type=Path))
@DEVICE
@DTYPE
@SEED
@VERBOSE
def audit(problem, device, dtype, seed, verbose) -> None:
    """Check PROBLEM's input spec: would a null answer (zeros, a constant, an input, another
    seed's output) pass, and is the reference deterministic? Exits 1 when the spec is weak."""

    def action() -> None:
        from harness.reference import reference_data

        options = RunOptions(device=resolve_device(device), dtype=dtype, seed=seed)
        spec = problem_from_target(str(problem), options.device, dtype)
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

    _run(verbose, action)


# The pull-request commands (review, github gate|measure|publish) register themselves on main.
from bot import cli_github, cli_nightly  # noqa: E402,F401

if __name__ == "__main__":  # python -m bot.cli: the module's group, which has every command
    from bot.cli import main as registered

    registered()
