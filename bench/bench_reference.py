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

Its parts: ``kb_yardstick.py`` (the worker start and the cases' own time, each in a fresh
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
from bench.bench_reference_tables import compare_table, load_side, markdown_table, progress_line
from bench.device_memory import MemoryPeak
from bench.kb_files import (
    harness_version,
    kill_children,
    problem_name,
    sample_files,
    sample_source,
    scaled_copy,
)
from bench.kb_yardstick import run_yardstick, worker_start_seconds
from bench.results_format import BenchmarkRecord, new_record, write_record

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def harness_root() -> Path:
    """The checkout whose harness is measured: --repo's DIR in the command run again for it,
    else this one."""
    return Path(os.environ.get(REPO_ENV) or ROOT)


def reexec_for_repo(repo: Path) -> None:
    """``--repo DIR``: run this command again with DIR first on PYTHONPATH (bench/__main__.py
    puts it first on the path before any harness module is imported), so that DIR's harness is
    measured here and in the workers it starts."""
    repo = repo.resolve()
    if not (repo / "harness" / "reference.py").is_file():
        sys.exit(f"--repo {repo}: no harness/problem/reference.py there")
    path = os.pathsep.join(p for p in [str(repo), os.environ.get("PYTHONPATH", "")] if p)
    env = dict(os.environ, PYTHONPATH=path, **{REPO_ENV: str(repo)})
    os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], env)


# The harness is imported where it is used: --help and --compare work whatever state the
# measured checkout is in.

# --- one problem ---------------------------------------------------------------------------


def measure_reference(path: Path, device: str, work: Path) -> dict:
    """``Evaluator.reference`` end to end (with the comparator worker up, where the harness
    has one); a UserError is the verdict, any other exception a bug."""
    from harness.config import EvalConfig
    from harness.errors import UserError
    from harness.evaluate import Evaluator
    from harness.problem.load import problem_from_target

    row: dict = {"verdict": "ok", "ok": True}
    with MemoryPeak(device) as memory:
        at_start = memory.now()
        start = time.perf_counter()
        try:
            problem = problem_from_target(str(path), device, "float32")
            evaluator = Evaluator(EvalConfig(), seed=0, work_dir=work)
            data = evaluator.reference(problem)
        except UserError as err:
            row.update(verdict=err.render(), ok=False)
        except Exception as err:  # a bug in the harness: recorded, and the table goes on
            row.update(verdict=f"bug: {type(err).__name__}: {err}", ok=False)
        row["reference_s"] = time.perf_counter() - start
        if row["ok"] and hasattr(evaluator, "close"):  # older checkouts have no comparator
            evaluator.close()
        peak, _ = memory.take()
    row["smi_peak_bytes"] = _growth_bytes(at_start, peak)
    if row["ok"]:
        row.update(_report_fields(data.report))
        row["recomputed"] = getattr(data, "recomputed", False)
        del data, evaluator  # stored reference outputs: gigabytes in this process
    return row


def _growth_bytes(at_start: int | None, peak: int | None) -> int | None:
    """The most device memory in use by all processes during the step (the value at its start
    counts), less the value at its start: MiB in, bytes out; None where there is no start value
    (off cuda, no nvidia-smi)."""
    if at_start is None:
        return None
    peak = at_start if peak is None else max(peak, at_start)
    return (peak - at_start) * MIB


def _report_fields(report) -> dict:
    # getattr only because this script also measures older checkouts (--repo, the "before"
    # column): their ReferenceReport has case_names and lacks cases (CaseSpec records),
    # peak_device_bytes and phase_seconds.
    names = getattr(report, "case_names", None) or [c.name for c in getattr(report, "cases", [])]
    return {
        "case_names": list(names),
        "audit_weak": report.audit.weak,
        "strengthened": report.strengthened,
        "device_name": report.device_name,
        "peak_device_bytes": getattr(report, "peak_device_bytes", None),
        "phase_seconds": getattr(report, "phase_seconds", None),
    }


def measure_problem(
    path: Path, device: str, work_root: Path, worker_start: float, repeat: int = 1
) -> dict:
    """The reference ``repeat`` times (a fresh work directory each), the median run's row
    (the first failure's, where one fails; the peaks are the most of any run), against the
    yardstick."""
    from harness.config import EvalConfig

    runs = []
    for _ in range(repeat):
        work = Path(tempfile.mkdtemp(prefix="problem-", dir=work_root))
        try:
            runs.append(measure_reference(path, device, work))
        finally:
            shutil.rmtree(work, ignore_errors=True)  # the case files: up to tens of GB
        if not runs[-1]["ok"]:
            break
    row = runs[-1] if not runs[-1]["ok"] else median_run(runs)
    row["reference_runs_s"] = [run["reference_s"] for run in runs]
    for key in ("smi_peak_bytes", "peak_device_bytes"):  # the most of any run, not the median's
        peaks = [run[key] for run in runs if run.get(key) is not None]
        if peaks:
            row[key] = max(peaks)
    config = EvalConfig()
    most = (
        config.seeds + config.shape_variants + int(config.wide_range) + int(config.strided_inputs)
    )
    cases = len(row.get("case_names") or []) or most
    row["cases"], row["cases_from"] = cases, "report" if row.get("case_names") else "assumed"
    row["yardstick"] = run_yardstick(path, device, cases, harness_root())
    cases_s = sum(row["yardstick"].get("case_s", [float("nan")]))
    row["goal_s"] = worker_start + 3 * cases_s
    row["ratio"] = row["reference_s"] / row["goal_s"]
    row["goal_met"] = bool(row["ok"] and row["ratio"] <= 1)
    return row


def median_run(runs: list[dict]) -> dict:
    """The run whose reference time is the median (the lower middle of an even count)."""
    ordered = sorted(runs, key=lambda run: run["reference_s"])
    return ordered[(len(ordered) - 1) // 2]


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
