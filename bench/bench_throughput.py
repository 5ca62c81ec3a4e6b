"""``python -m bench throughput``: candidates judged per hour, kernelpilot's way against a serial
KernelBench-style loop, on the same candidates in one run (issue 27, goals 3 and 5).

    python -m bench throughput PROBLEM [--device cuda] [--candidates 4] [--gpus 1,2] [--out FILE]

The candidates are the offline proposer's kernel for PROBLEM, each made a build of its own by a
comment in its native source, so that every one is built, checked and timed in full. One more is
evaluated first and not counted (what a machine's first evaluation pays once: the workers'
bytecode, torch.compile's cache). Each way then starts from a fresh build cache and a fresh
evaluator (its first build precompiles torch's headers, as a run's first does), with every
check and the torch.compile baseline on:

- serial (unless ``--without-serial``): one candidate after another, built, checked and timed
  (KernelBench's loop), on one GPU;
- kernelpilot on N GPUs: the candidates as one step of a search (``agents.loop
  .evaluate_children``): built in parallel, each checked and timed as soon as its build is done
  and one of N GPUs is free (``eval.gpus``), its timing worker started while its checks run
  (``harness.prestart``);
- with ``--without-prestart``, kernelpilot on N GPUs again with each timing worker started
  after its checks (``eval.prestart_timing = false``): what the prestart alone is worth.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click
import torch

from agents.loop import evaluate_children
from agents.offline import propose_here
from agents.search.tree import Tree
from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.gpus import visible_gpus
from harness.problem.load import problem_from_target
from harness.records import Candidate, EvalResult, Problem

SOURCES = ('_CUDA_SOURCE = r"""', '_CPP_SOURCE = r"""')


def candidates(problem: Problem, labels: list[str]) -> list[Candidate]:
    """The offline proposer's candidate once per label, each with its label as a comment at the
    top of its first native source: the same kernel, a build each."""
    proposal = propose_here(problem)
    if proposal.candidate is None:
        raise click.ClickException(f"{problem.name}: no offline candidate ({proposal.reason})")
    source = proposal.candidate.source
    opening = next(marker for marker in SOURCES if marker in source)
    return [
        Candidate(source=source.replace(opening, f"{opening}\n// {label}\n", 1), origin="offline")
        for label in labels
    ]


def _progress(way: str) -> Callable[[str], None]:
    """The evaluator's progress lines, timed from now: a run cut short still says how far each
    way got."""
    started = time.perf_counter()
    return lambda message: print(f"{time.perf_counter() - started:7.1f} s  {way}: {message}",
                                 flush=True)  # fmt: skip


def serial(
    problem: Problem, batch: list[Candidate], config: EvalConfig, way: str = "serial"
) -> list[EvalResult]:
    """Build, check and time each candidate in turn, each step after the one before."""
    config = config.model_copy(update={"gpus": 1, "prestart_timing": False})
    evaluator = Evaluator(config, seed=0, progress=_progress(way))
    try:
        return [evaluator.evaluate(problem, candidate) for candidate in batch]
    finally:
        evaluator.close()


def pipelined(
    problem: Problem, batch: list[Candidate], config: EvalConfig, gpus: int, way: str
) -> list[EvalResult]:
    """The candidates as one search step over ``gpus`` GPUs."""
    evaluator = Evaluator(config.model_copy(update={"gpus": gpus}), seed=0,
                          progress=_progress(f"{way} on {gpus}"))  # fmt: skip
    tree = Tree.rooted()
    children = [tree.add(tree.root, "improve", source=c.source) for c in batch]
    try:
        evaluate_children(problem, evaluator, tree, children)
    finally:
        evaluator.close()
    return [child.result for child in children if child.result is not None]


def phase_medians(results: list[EvalResult]) -> dict[str, float]:
    """Each phase's median seconds over the candidates that went through it (build, check,
    eager alone, compile, timing...): where a candidate's cost goes."""
    phases = sorted({name for result in results for name in result.phase_seconds})
    return {
        name: round(statistics.median(r.phase_seconds[name] for r in results
                                      if name in r.phase_seconds), 1)
        for name in phases
    }  # fmt: skip


NO_PRESTART = "kernelpilot, no prestart"


def measure(
    target: str,
    device: str,
    count: int,
    gpu_counts: list[int],
    without_prestart: bool,
    with_serial: bool = True,
) -> list[dict]:
    problem = problem_from_target(target, device, None)
    warm_up, *batch = candidates(problem, ["warm-up", *(f"candidate {n}" for n in range(count))])
    # Not counted: what the first evaluation on a machine pays once for all (the sandboxed
    # workers' bytecode, torch.compile's own cache of the baseline), so that no way pays it.
    with tempfile.TemporaryDirectory(prefix="kp-throughput-") as cache:
        (warm,) = serial(problem, [warm_up], EvalConfig(cache_dir=Path(cache)), "warm-up")
        print(f"warm-up: {warm.status.value} {warm.phase_seconds}", flush=True)
    ways: list[tuple[str, int]] = [("serial", 1)] if with_serial else []
    ways += [("kernelpilot", n) for n in gpu_counts]
    ways += [(NO_PRESTART, n) for n in gpu_counts if without_prestart]
    rows = []
    for way, gpus in ways:
        with tempfile.TemporaryDirectory(prefix="kp-throughput-") as cache:
            config = EvalConfig(cache_dir=Path(cache), prestart_timing=way != NO_PRESTART)
            started = time.perf_counter()
            if way == "serial":
                results = serial(problem, batch, config)
            else:
                results = pipelined(problem, batch, config, gpus, way)
            seconds = time.perf_counter() - started
        statuses = [result.status.value for result in results]
        row = {
            "way": way,
            "gpus": gpus if device == "cuda" else 0,
            "candidates": count,
            "seconds": round(seconds, 1),
            "per_hour": round(count / seconds * 3600, 1),
            "statuses": statuses,
            "phase_median_s": phase_medians(results),
        }
        print(f"{way} on {row['gpus']} GPU(s): {count} candidates in {seconds:.1f} s "
              f"({row['per_hour']:.0f}/hour): {', '.join(statuses)}; phases (median s): "
              f"{row['phase_median_s']}", flush=True)  # fmt: skip
        rows.append(row)
    return rows


def table(record: BenchmarkRecord) -> str:
    serial = [row["per_hour"] for row in record.rows if row["way"] == "serial"]
    one_gpu = [r["per_hour"] for r in record.rows if r["way"] == "kernelpilot" and r["gpus"] == 1]
    lines = [
        "| way | GPUs | candidates | wall (s) | candidates per hour | vs serial | vs kernelpilot "
        "on one GPU | verdicts | a candidate's phases (median s) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record.rows:
        verdicts = ", ".join(sorted(set(row["statuses"])))
        phases = ", ".join(f"{name} {s}" for name, s in row.get("phase_median_s", {}).items())
        lines.append(
            f"| {row['way']} | {row['gpus']} | {row['candidates']} | {row['seconds']} | "
            f"{row['per_hour']} | {_ratio(row['per_hour'], serial)} | "
            f"{_ratio(row['per_hour'], one_gpu)} | {verdicts} | {phases} |"
        )
    return "\n".join(lines)


def _ratio(rate: float, against: list[float]) -> str:
    return f"{rate / against[0]:.2f}x" if against else "-"


@click.command(name="throughput")
@click.argument("problem")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cuda", show_default=True)
@click.option(
    "--candidates", "count", default=4, show_default=True, help="Candidates judged each way."
)
@click.option(
    "--gpus",
    default="",
    help="Comma-separated GPU counts for kernelpilot's way, e.g. 1,2 [default: 1 and, where "
    "more are visible, all of them; cpu: one way].",
)
@click.option(
    "--without-prestart",
    is_flag=True,
    help="Also run kernelpilot's way with each timing worker started after its checks.",
)
@click.option(
    "--without-serial",
    is_flag=True,
    help="Leave the serial loop out (kernelpilot's ways alone: GPUs against one GPU).",
)
@out_option
def cli(
    problem: str,
    device: str,
    count: int,
    gpus: str,
    without_prestart: bool,
    without_serial: bool,
    out: Path | None,
) -> None:
    """Candidates per hour: a serial build-check-time loop against kernelpilot's pipeline."""
    if device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("--device cuda, but PyTorch sees no CUDA GPU")
    if gpus:
        counts = [int(n) for n in gpus.split(",")]
    else:
        visible = len(visible_gpus()) if device == "cuda" else 1
        counts = sorted({1, visible})
    record = new_record("throughput", device, context={"problem": problem})
    record.rows = measure(problem, device, count, counts, without_prestart, not without_serial)
    finish(record, out, table)
