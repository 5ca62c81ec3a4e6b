"""Reference + audit time of KernelBench problems, against the goal below.

For each problem file, the wall time of ``Evaluator(EvalConfig()).reference(problem)`` end to
end, what a search waits for before its first candidate: the reference worker's start, the
cases, the audit, the case files where outputs are stored, and where a comparator worker makes
them again per candidate (the default on cuda), its start beside it until it is up. The
yardstick it is held to:

    goal = worker start + 3 x (the cases' own input generation and eager forwards)

- worker start: a bare interpreter importing torch and the reference worker's modules (on cuda
  also creating the CUDA context), median of 3, measured once per run;
- the cases: as many as the reference made (its report's case_names; where it made none, the
  most EvalConfig() makes: 5 seeds + 4 extra cases), each ``make_inputs(problem, seed)`` plus
  the eager forward plus a synchronize, in a fresh process of their own (the first forward's
  library loads, cuBLAS or cuDNN, included: the worker pays them too). Constructing the module
  (``build_s``) is recorded but not in the goal.

ratio = reference seconds / goal; the goal is met when the reference ran (verdict ok) and
ratio <= 1. With ``--repeat N`` the reference seconds are the median of N runs (all kept in
``reference_runs_s``): a single run's worker start alone spreads by 0.5 s.

Peak device memory: the report's ``peak_device_bytes`` where the harness reports it, and
always on cuda nvidia-smi's memory.used of all processes sampled during the run (every 0.2 s),
less its value at the start (so it includes the worker's CUDA context).

    python -m bench reference [PROBLEM.py ...] [--device auto|cpu|cuda] [--out FILE]
        [--only TEXT ...] [--repo DIR] [--work-dir DIR] [--scale-down N] [--repeat N]
    python -m bench reference --compare BEFORE.json[,MORE.json] AFTER.json[,MORE.json]

Its parts: ``bench_reference_measure.py`` (one problem's reference, its repeats and peaks, against
the goal), ``kb_yardstick.py`` (the worker start and the cases' own time, each in a fresh
process), ``kb_files.py`` (the problem files, scaled copies, the harness commit, the JSON
written, leftover workers ended), ``device_memory.py`` (nvidia-smi's peak),
``bench_reference_tables.py`` (the progress line and the markdown tables).

Problems default to .kb/problems (bench/fetch_kernelbench.sh), in its sample.txt order.
``--repo DIR`` measures another checkout's harness (DIR/harness, e.g. .kb/before from
``bash bench/fetch_kernelbench.sh --before REV``): the command runs again with DIR first on
PYTHONPATH (and first on its own path: bench/__main__.py), so DIR's harness is imported here and
in its workers. The JSON is rewritten after
every problem; an interrupt (a stage's time limit) records the problem it stopped in.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import click
import torch

from bench import REPO_ENV
from bench.bench_reference_measure import harness_root, measure_problem
from bench.bench_reference_tables import compare_table, load_side, markdown_table, progress_line
from bench.kb_files import (
    harness_version,
    kill_children,
    problem_name,
    sample_files,
    sample_source,
    scaled_copy,
)
from bench.kb_yardstick import worker_start_seconds
from bench.results_format import BenchmarkRecord, new_record, write_record


def reexec_for_repo(repo: Path) -> None:
    """``--repo DIR``: run this command again with DIR first on PYTHONPATH (bench/__main__.py
    puts it first on the path before any harness module is imported), so that DIR's harness is
    measured here and in the workers it starts."""
    repo = repo.resolve()
    layouts = ("harness/problem/reference.py", "harness/reference.py")  # now, and before
    if not any((repo / layout).is_file() for layout in layouts):
        sys.exit(f"--repo {repo}: no harness/problem/reference.py (or harness/reference.py) there")
    path = os.pathsep.join(p for p in [str(repo), os.environ.get("PYTHONPATH", "")] if p)
    env = dict(os.environ, PYTHONPATH=path, **{REPO_ENV: str(repo)})
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], env)


# --- the run -------------------------------------------------------------------------------


def run(
    files: list[Path],
    device: str,
    out: Path | None,
    work_dir: Path | None,
    scale_down: int | None,
    repeat: int,
) -> BenchmarkRecord:
    work_root = Path(tempfile.mkdtemp(prefix="kbref-", dir=work_dir))
    source = sample_source(files)
    if scale_down:
        files = [scaled_copy(f, scale_down, work_root / "scaled") for f in files]
    starts = worker_start_seconds(device, harness_root(), max(3, repeat))
    context = {
        "harness": harness_version(harness_root()),
        "harness_root": str(harness_root()),
        "sample_source": source,
        "published_sizes": not scale_down,
        "scale_down": scale_down,
        "worker_start_s": statistics.median(starts),
        "worker_start_runs": starts,
        "repeat": repeat,
    }
    record = new_record("reference", device, context=context)
    print(
        f"harness {context['harness']} ({harness_root()}), device {device}, worker start "
        f"{context['worker_start_s']:.2f} s (runs {', '.join(f'{s:.2f}' for s in starts)})"
    )
    save = (lambda: write_record(record, out)) if out else (lambda: None)
    save()
    try:
        for number, path in enumerate(files, 1):
            name = problem_name(path)
            print(f"[{number}/{len(files)}] {name} ...", flush=True)
            started = time.perf_counter()
            try:
                row = measure_problem(path, device, work_root, context["worker_start_s"], repeat)
            except KeyboardInterrupt:
                seconds = time.perf_counter() - started
                record.rows.append(
                    {"problem": name, "verdict": f"interrupted after {seconds:.0f} s"}
                )
                raise
            record.rows.append({"problem": name, **row})
            print("    " + progress_line(row), flush=True)
            save()
    finally:
        kill_children()
        save()
        shutil.rmtree(work_root, ignore_errors=True)
    return record


# --- entry ---------------------------------------------------------------------------------


@click.command("reference", epilog="See bench/bench_reference.py for the yardstick.")
@click.argument("problems", nargs=-1, type=click.Path(path_type=Path))
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              help="Where the reference runs (auto: cuda when a GPU is visible).")  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="The results record (JSON), rewritten after every problem.")  # fmt: skip
@click.option("--only", multiple=True, metavar="TEXT",
              help="Only the problems whose path contains this text (repeatable).")  # fmt: skip
@click.option("--repo", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Measure DIR's harness (DIR/harness; e.g. .kb/before) instead of this "
              "checkout's.")  # fmt: skip
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Where the case files are written (default: the system temp).")  # fmt: skip
@click.option("--scale-down", type=click.IntRange(min=1), metavar="N",
              help="CPU trials only: divide the files' integer constants >= 256 by N; the sizes "
              "are then NOT the published ones (the table says so).")  # fmt: skip
@click.option("--repeat", type=click.IntRange(min=1), default=1, metavar="N",
              help="Measure each reference N times and report the median run; the worker start "
              "is the median of max(3, N) runs.")  # fmt: skip
@click.option("--compare", nargs=2, metavar="BEFORE AFTER",
              help="Print the before/after table of --out files, measure nothing; a side run "
              "over several calls: its files joined by commas.")  # fmt: skip
def cli(
    problems: tuple[Path, ...],
    device: str,
    out: Path | None,
    only: tuple[str, ...],
    repo: Path | None,
    work_dir: Path | None,
    scale_down: int | None,
    repeat: int,
    compare: tuple[str, str] | None,
) -> None:
    """Reference + audit time of KernelBench problems against their goal (worker start + 3x the cases)."""
    if compare:
        before, after = (load_side(text) for text in compare)
        print(compare_table(before, after))
        return
    if repo is not None and not os.environ.get(REPO_ENV):
        reexec_for_repo(repo)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    import harness

    if not Path(harness.__file__).resolve().is_relative_to(harness_root().resolve()):
        sys.exit(f"imported {harness.__file__}, not the harness of {harness_root()}")
    files = sample_files(list(problems), list(only))
    record = run(files, device, out, work_dir, scale_down, repeat)
    print()
    print(markdown_table(record))
