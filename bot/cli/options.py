"""What the commands share: their options (each defined once), how a command runs and ends
(``run_command``), progress lines, and the run's options from the flags."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from bot.cli.out_dir import claim_option
from bot.cli.params import not_blank
from bot.pr.flow import DEFAULT_MAX_TARGETS
from bot.run import RunOptions
from bot.settings import load_settings
from harness.devices import resolve_device
from harness.errors import HarnessError, UserError
from harness.sandbox import lifetime
from harness.sandbox.redact import scrub

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
BASE_REF = click.option(
    "--base", required=True, callback=not_blank,
    help="The branch or commit the changes are compared to.",
)  # fmt: skip
HEAD_REF = click.option(
    "--head", default="HEAD", show_default=True, callback=not_blank,
    help="The commit with the changes (checked out: its modules run as they are there).",
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
GPUS = click.option(
    "--gpus",
    type=click.IntRange(min=0),
    default=None,
    envvar="KERNELPILOT_GPUS",
    help="cuda: GPUs to check and time candidates on, one candidate at a time on each (a search "
    "step proposes one candidate per GPU); 0: every visible one [default: the project's "
    "eval.gpus, 0; env: KERNELPILOT_GPUS].",
)
BUDGET = click.option(
    "--time-budget",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds of timing per implementation [default: 1.5].",
)


def _llm_option(name: str, env: bool, **settings):
    """``--NAME``; with ``env`` also read from ``KERNELPILOT_NAME`` (the action's jobs pass
    their inputs so, never as text in a shell command), which its help names."""
    envvar = f"KERNELPILOT_{name.upper().replace('-', '_')}" if env else None
    text = settings.pop("help") + (f" [env: {envvar}]" if envvar else "")
    return click.option(f"--{name}", envvar=envvar, help=text, **settings)


def llm_options(env: bool = False, resumable: bool = False):
    """Who proposes kernels and the search's budgets, defined once for every command that
    searches: ``env`` reads them from the environment too (the jobs); ``resumable`` adds
    --max-time and --resume (optimize)."""
    options = [
        _llm_option(
            "llm", env, type=click.Choice(["auto", "offline", "openai", "scripted"]),
            default="auto", show_default=True,
            help="Who proposes kernels: auto uses the LLM team when an endpoint is configured "
            "(OPENAI_API_KEY or OPENAI_BASE_URL, or [tool.kernelpilot.llm]), else the offline "
            "proposer; scripted replays --script.",
        ),
        _llm_option("model", env, default=None,
                    help="LLM model name [default: llm.model, gpt-4.1]."),
        _llm_option(
            "script", env, type=click.Path(exists=True, dir_okay=False, path_type=Path),
            default=None,
            help="Replies for --llm scripted (a JSON list; see agents/llm/scripted.py).",
        ),
        _llm_option("budget", env, type=click.IntRange(min=1), default=None,
                    help="Candidates to try per target [default: search.attempts, 30]."),
        _llm_option(
            "max-cost", env, type=click.FloatRange(min=0, min_open=True), default=None,
            help="Stop a target's search at this LLM cost (USD) [default: search.max_cost_usd, "
            "5].",
        ),
    ]  # fmt: skip
    if resumable:
        options += [
            _llm_option(
                "max-time", False, type=click.FloatRange(min=0, min_open=True), default=None,
                help="Stop a target's search after these seconds, LLM calls and candidates' "
                "runs cut short where they are.",
            ),
            _llm_option(
                "resume", False, type=click.Path(exists=True, dir_okay=False, path_type=Path),
                default=None,
                help="Continue the search saved in a trajectory-*.json (its target, seeds and "
                "tree).",
            ),
        ]  # fmt: skip

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def progress(message: str) -> None:
    click.echo(f"[{time.strftime('%H:%M:%S')}] {message}", err=True)


def run_command(verbose: bool, action, interrupted: Callable[[], str] | None = None) -> None:
    """Run a command as the process's run (``harness.sandbox.lifetime``): whatever ends it, every
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


def run_options(
    device, dtype, out_dir, seed, no_compile: bool, budget, start=None, gpus: int | None = None
) -> RunOptions:
    """The run's options, with the project's settings read once (the nearest pyproject.toml at
    or above ``start``, default here); ``--device auto`` defers to the project's ``device``
    setting (which is itself auto by default)."""
    settings = load_settings(start)
    return RunOptions(
        device=resolve_device(settings.device if device == "auto" else device),
        settings=settings,
        dtype=dtype,
        out_dir=out_dir,
        seed=seed,
        compile_baseline=False if no_compile else None,
        time_budget_s=budget,
        gpus=gpus,
    )


MAX_TARGETS = click.option(
    "--max-targets",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TARGETS,
    show_default=True,
    envvar="KERNELPILOT_MAX_TARGETS",
    help="Changed modules optimized per run; the rest are listed in the comment "
    "[env: KERNELPILOT_MAX_TARGETS].",
)


def pull_run_options(
    device, dtype, out_dir, seed, no_compile, llm, model, script, budget, max_cost, repo, gpus
):  # fmt: skip
    """A pull-request flow's options (review, github measure): the run's, and the LLM's."""
    options = run_options(device, dtype, out_dir, seed, no_compile, None, start=repo.resolve(),
                          gpus=gpus)  # fmt: skip
    return options.model_copy(
        update={"llm": llm, "model": model, "script": script, "attempts": budget,
                "max_cost_usd": max_cost}
    )  # fmt: skip
