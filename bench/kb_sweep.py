"""Every KernelBench level-1 and level-2 problem through the harness, one at a time.

For each problem file, in this process and with one ``Evaluator`` for the whole sweep:

- ``evaluator.reference(problem)``, timed: the reference worker's cases and the audit (and on
  cuda the comparator worker's start). A ``UserError`` (a weak spec, the device's memory) is
  the problem's result, recorded with the first lines of its message;
- then ``evaluator.evaluate(problem, candidate)`` on one generic candidate made from the
  problem file itself: its ``Model`` renamed ``ModelNew``, whose ``forward`` runs the
  reference's forward and passes every output tensor through a copy kernel of its own
  (``load_inline``: CUDA on cuda, a C++ loop on cpu). The harness rejects that candidate
  (``no_pytorch_compute``: it computes with the reference's PyTorch ops); what is measured is
  whether it gets that far at the published size without running out of memory or into a
  harness error. The rejection comes in the candidate's worker after its first case's forward,
  before that case's outputs go to the comparator: the comparator's own case is not exercised.
  ``--candidate offline`` takes the offline proposer's candidate instead (pointwise chains and
  row reductions fused into generated kernels, library ops kept): an honest one that goes
  through the comparator and the timing, as a search's first candidate does (slower). A
  problem it has no candidate for runs nothing on the device: its row says why
  (``no_candidate``, the proposer's reason). ``--propose-only`` asks the proposer alone, for
  every problem, and runs nothing on the device (the proposer traces on the CPU): which
  problems it touches, and why not the others;
- peak device memory (nvidia-smi, sampled every 0.2 s) for each of the two steps, of all
  processes and of this sweep's own; the verdict's phase times (build, checks, compile,
  timing) and an ok candidate's speedups; then ``evaluator.release(problem)``. ``--verbose``
  prints the evaluator's steps with the sweep's elapsed seconds as they come.

Two sweeps may share one device (``--beside 1`` on each, disjoint problem lists, own
``--out``): a problem's own peak is then still its own, and one that runs out of memory beside
the other is run again alone by ``--resume``.

The results record (``--out``, one row per problem) is rewritten after every problem, and a row
marked ``interrupted`` is written before each one starts, so a run cut short keeps what it did
and names the problem it stopped in. ``--resume`` skips the problems already in ``--out`` (one left
``interrupted`` is tried once more); ``--limit-s`` starts no new problem after that many
seconds, so a run under a time limit ends on its own.

    python -m bench kb-sweep [PROBLEM.py ...] [--device cuda|cpu] [--out FILE] [--resume]
        [--limit-s S] [--scale-down N] [--candidate copy|offline] [--prebuild] [--verbose]
        [--beside N] [--work-dir DIR] [--plot PNG]
    python -m bench kb-sweep --propose-only [PROBLEM.py ...] [--device D] [--out FILE]
    python -m bench kb-sweep --table OUT.json ... [--plot PNG]   # a markdown table of what ran

Its parts: ``kb_problem.py`` (one problem's steps, the prebuild), ``kb_copy_candidate.py``
(the copy candidate), ``device_memory.py`` (the peaks), ``kb_sweep_rows.py`` (the rows, the
summary, the table), ``kb_files.py`` (the problems' names, scaled copies, leftover workers
ended; shared with bench_reference.py).

Problems are files or folders (a folder's .py files in the order of their leading numbers);
by default .kb/all/level1 then .kb/all/level2 (``bash bench/fetch_kernelbench.sh --all``).
``--scale-down N`` (CPU trials) divides the files' module-level integer constants >= 256 by N;
its rows say ``published_size: false``.
"""

from __future__ import annotations

import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from bench.device_memory import MemoryPeak
from bench.kb_files import kill_children, problem_name, scaled_copy
from bench.kb_plot import plot_speedups
from bench.kb_problem import made_for, prebuild, proposal_row, sweep_problem
from bench.kb_sweep_rows import (
    SweepRow,
    interrupted,
    progress_line,
    read_rows,
    summary,
    table,
    write_rows,
)
from bench.results_format import new_record

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SweepOptions:
    """The command line's choices for one sweep (see ``cli``)."""

    problems: list[Path]
    device: str
    out: Path | None
    resume: bool
    limit_s: float | None
    scale_down: int | None
    candidate: str
    prebuild: bool
    verbose: bool
    beside: int
    work_dir: Path | None
    propose_only: bool


# --- the sweep -----------------------------------------------------------------------------


def _timed_progress(since: float):
    """The evaluator's progress lines, each with the sweep's elapsed seconds: where a problem
    stopped at a time limit, the last line says how long each step had taken."""

    def show(message: str) -> None:
        print(f"  {time.monotonic() - since:7.1f} s  {message}", flush=True)

    return show


def leading_number(path: Path) -> tuple[int, str]:
    number = re.match(r"\d+", path.name)
    return (int(number.group(0)) if number else sys.maxsize, path.name)


def problem_files(given: list[Path]) -> list[Path]:
    """The problems named, a folder standing for its .py files in the order of their leading
    numbers; none named: .kb/all/level1 then level2."""
    if not given:
        folder = ROOT / ".kb" / "all"
        given = [folder / "level1", folder / "level2"]
        if not any(level.is_dir() for level in given):
            sys.exit(f"no problems in {folder}: run bash bench/fetch_kernelbench.sh --all")
    files: list[Path] = []
    for path in given:
        if path.is_dir():
            files.extend(sorted(path.glob("*.py"), key=leading_number))
        elif path.is_file():
            files.append(path)
        else:
            sys.exit(f"{path}: no such problem file or folder")
    return files


def proposals(args: SweepOptions) -> list[SweepRow]:
    """The offline proposer's answer for every problem, nothing run on the device."""
    files = problem_files(args.problems)
    work = Path(tempfile.mkdtemp(prefix="kbsweep-", dir=args.work_dir))
    # The proposer traces on the CPU: the record is this machine's, the rows name the target.
    context = {"candidate": "offline", "propose_only": True, "proposed_for": args.device}
    record = new_record("kb-sweep", "cpu", context=context)
    print(f"{len(files)} problems to ask the offline proposer about, device {args.device}")
    rows: list[SweepRow] = []
    try:
        if args.scale_down:
            files = [scaled_copy(f, args.scale_down, work / "scaled") for f in files]
        for number, (path, made) in enumerate(made_for(files, "offline", args.device), 1):
            row = SweepRow(
                name=problem_name(path), device=args.device, published_size=not args.scale_down,
                reference_status="not_run",
            )  # fmt: skip
            proposal_row(row, made)
            rows.append(row)
            write_rows(args.out, record, rows)
            print(f"[{number}/{len(files)}] {progress_line(row)}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


def sweep(args: SweepOptions) -> list[SweepRow]:
    from harness.config import EvalConfig
    from harness.evaluate import Evaluator

    rows = read_rows(args.out) if args.resume and args.out and args.out.is_file() else []
    record = new_record("kb-sweep", args.device, context={"candidate": args.candidate})
    # A problem the last call stopped inside is tried once more (it may have been the call's
    # time limit, not the problem); interrupted twice, it stays so. One that ran out of memory
    # while another sweep shared the device is run again too: alone, it may fit.
    retry = {
        row.name: row.attempt + 1
        for row in rows
        if (interrupted(row) and row.attempt < 2) or (row.memory_error and row.beside)
    }
    rows = [row for row in rows if row.name not in retry]
    done = {row.name for row in rows}
    files = [f for f in problem_files(args.problems) if problem_name(f) not in done]
    work = Path(tempfile.mkdtemp(prefix="kbsweep-", dir=args.work_dir))
    if args.scale_down:
        files = [scaled_copy(f, args.scale_down, work / "scaled") for f in files]
    evaluator = Evaluator(
        EvalConfig(),
        seed=0,
        work_dir=work / "eval",
        progress=_timed_progress(time.monotonic()) if args.verbose else None,
    )
    started = time.monotonic()
    print(
        f"{len(files)} problems to run ({len(done)} already in {args.out}), device {args.device}",
        flush=True,
    )
    try:
        prepared = prebuild(evaluator, files, args.candidate, args.device) if args.prebuild else {}
        with MemoryPeak(args.device) as memory:
            for number, path in enumerate(files, 1):
                if args.limit_s is not None and time.monotonic() - started > args.limit_s:
                    print(f"time limit: {len(files) - number + 1} problems not started", flush=True)
                    break
                row = SweepRow(
                    name=problem_name(path),
                    device=args.device,
                    published_size=not args.scale_down,
                    reference_status="interrupted",
                    attempt=retry.get(problem_name(path), 1),
                    beside=args.beside,
                )
                rows.append(row)
                write_rows(args.out, record, rows)
                sweep_problem(evaluator, path, args.candidate, memory, row, prepared)
                write_rows(args.out, record, rows)
                print(f"[{number}/{len(files)}] {progress_line(row)}", flush=True)
    except KeyboardInterrupt:  # a stage's time limit (SIGINT, or SIGTERM: see main)
        print(f"interrupted inside {rows[-1].name if rows else 'the start'}", flush=True)
    finally:
        evaluator.close()
        kill_children()
        write_rows(args.out, record, rows)
        shutil.rmtree(work, ignore_errors=True)
    return rows


@click.command("kb-sweep", epilog="See bench/kb_sweep.py for what each row records.")
@click.argument("problems", nargs=-1, type=click.Path(path_type=Path))
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default="cuda", show_default=True,
              help="Where the problems run.")  # fmt: skip
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path),
              help="The results record (JSON), rewritten after every problem; without it, the "
              "table is printed at the end.")  # fmt: skip
@click.option("--resume", is_flag=True,
              help="Keep --out's rows and skip their problems; one the last run stopped inside "
              "(interrupted) is run once more.")  # fmt: skip
@click.option("--limit-s", type=click.FloatRange(min=0), metavar="S",
              help="Start no new problem after S seconds of wall time.")  # fmt: skip
@click.option("--scale-down", type=click.IntRange(min=1), metavar="N",
              help="CPU trials only: divide the files' integer constants >= 256 by N (NOT the "
              "published sizes).")  # fmt: skip
@click.option("--candidate", type=click.Choice(["copy", "offline"]), default="copy",
              show_default=True,
              help="copy: the generic copy candidate; offline: the offline proposer's candidate "
              "(through the comparator and the timing); a problem it has none for runs "
              "nothing, its row gives the proposer's reason.")  # fmt: skip
@click.option("--propose-only", is_flag=True,
              help="Run nothing on the device: ask the offline proposer about every problem "
              "and record which ones it has a candidate for, and why not the others.")  # fmt: skip
@click.option("--prebuild", is_flag=True,
              help="Build every problem's candidate first, as many at once as there are cores.")  # fmt: skip
@click.option("--table", "tables", multiple=True, type=click.Path(exists=True, path_type=Path),
              metavar="JSON",
              help="Run nothing: print the rows of this --out file (repeatable) as a markdown "
              "table, then the summary.")  # fmt: skip
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), metavar="PNG",
              help="Also draw the ok candidates' speedups (vs torch.compile, sorted; vs eager "
              "as dots) into this PNG, with their geometric means.")  # fmt: skip
@click.option("--verbose", is_flag=True,
              help="Print the evaluator's progress lines as they come.")  # fmt: skip
@click.option("--beside", type=click.IntRange(min=0), default=0, metavar="N",
              help="N other sweeps share the device (recorded in each row; a problem that runs "
              "out of memory then is run again by --resume).")  # fmt: skip
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
              help="Where the case files go (default: the system temp).")  # fmt: skip
def cli(problems: tuple[Path, ...], tables: tuple[Path, ...], plot: Path | None, **options) -> None:
    """Every KernelBench level-1 and level-2 problem through the harness, one at a time."""
    # SIGTERM as SIGINT: the sweep ends through its finally blocks, workers stopped, rows kept.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if tables:
        rows = [row for path in tables for row in read_rows(path)]
        print(table(rows))
        print()
        print(summary(rows))
        _plot(rows, plot)
        return
    if options["resume"] and options["out"] is None:
        raise click.UsageError("--resume reads the rows of --out: give --out FILE")
    args = SweepOptions(problems=list(problems), **options)
    rows = proposals(args) if args.propose_only else sweep(args)
    print()
    if args.out is None:
        print(table(rows))
        print()
    print(summary(rows))
    _plot(rows, plot)


def _plot(rows: list[SweepRow], path: Path | None) -> None:
    if path is None:
        return
    count = plot_speedups(rows, path)
    print(f"plotted {count} problems into {path}" if count else "no ok candidate to plot")
