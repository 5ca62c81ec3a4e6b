"""Every KernelBench level-1 and level-2 problem through the harness, one at a time (issue 10).

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
  ``--candidate offline`` takes the offline proposer's candidate instead where it has one
  (pointwise chains fused into generated kernels, library ops kept): an honest one that goes
  through the comparator and the timing, as a search's first candidate does (slower);
- peak device memory (nvidia-smi, sampled every 0.2 s) for each of the two steps, of all
  processes and of this sweep's own; the verdict's phase times (build, checks, compile,
  timing) and an ok candidate's speedups; then ``evaluator.release(problem)``. ``--verbose``
  prints the evaluator's steps with the sweep's elapsed seconds as they come.

Two sweeps may share one device (``--beside 1`` on each, disjoint problem lists, own
``--out``): a problem's own peak is then still its own, and one that runs out of memory beside
the other is run again alone by ``--resume``.

The JSON (a list of rows) is rewritten after every problem, and a row marked ``interrupted``
is written before each one starts, so a call cut short keeps what it did and names the
problem it stopped in. ``--resume`` skips the problems already in ``--out`` (one left
``interrupted`` is tried once more); ``--limit-s`` starts no new problem after that many
seconds, so a device call ends on its own.

    python bench/kb_sweep.py [PROBLEM.py ...] [--device cuda|cpu] [--out FILE] [--resume]
        [--limit-s S] [--scale-down N] [--candidate copy|offline] [--prebuild] [--verbose]
        [--beside N] [--work-dir DIR]
    python bench/kb_sweep.py --table OUT.json ...   # a markdown table of what ran

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

import argparse
import json
import re
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the checkout's harness, installed or not

from device_memory import MemoryPeak  # noqa: E402
from kb_files import kill_children, problem_name, scaled_copy  # noqa: E402
from kb_problem import prebuild, sweep_problem  # noqa: E402
from kb_sweep_rows import (  # noqa: E402
    SweepRow,
    interrupted,
    progress_line,
    summary,
    table,
    write_rows,
)

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


def sweep(args: argparse.Namespace) -> list[SweepRow]:
    from harness.config import EvalConfig
    from harness.evaluate import Evaluator

    rows = (
        [SweepRow(**row) for row in json.loads(args.out.read_text())]
        if args.resume and args.out.is_file()
        else []
    )
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
                write_rows(args.out, rows)
                sweep_problem(evaluator, path, args.candidate, memory, row, prepared)
                write_rows(args.out, rows)
                print(f"[{number}/{len(files)}] {progress_line(row)}", flush=True)
    except KeyboardInterrupt:  # a stage's time limit (SIGINT, or SIGTERM: see main)
        print(f"interrupted inside {rows[-1].name if rows else 'the start'}", flush=True)
    finally:
        evaluator.close()
        kill_children()
        write_rows(args.out, rows)
        shutil.rmtree(work, ignore_errors=True)
    return rows


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "problems",
        nargs="*",
        type=Path,
        help="KernelBench problem files or folders of them (default: .kb/all/level1 then level2)",
    )
    parser.add_argument(
        "--device",
        default="cuda",
        choices=["cuda", "cpu"],
        help="where the problems run (default cuda)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("kb_sweep.json"),
        help="JSON list of rows, rewritten after every problem (default kb_sweep.json)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="keep --out's rows and skip their problems; one the last run stopped inside "
        "(interrupted) is run once more",
    )
    parser.add_argument(
        "--limit-s",
        type=float,
        metavar="S",
        help="start no new problem after S seconds of wall time",
    )
    parser.add_argument(
        "--scale-down",
        type=int,
        metavar="N",
        help="CPU trials only: divide the files' integer constants >= 256 by N (NOT the published sizes)",
    )
    parser.add_argument(
        "--candidate",
        choices=["copy", "offline"],
        default="copy",
        help="copy (default): the generic copy candidate; offline: the offline proposer's "
        "candidate where it has one (through the comparator and the timing), else copy",
    )
    parser.add_argument(
        "--prebuild",
        action="store_true",
        help="build every problem's candidate first, as many at once as there are cores",
    )
    parser.add_argument(
        "--table",
        nargs="+",
        type=Path,
        metavar="JSON",
        help="run nothing: print the rows of these --out files as a markdown table, then the "
        "summary",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the evaluator's progress lines (reference, checks, timing) as they come",
    )
    parser.add_argument(
        "--beside",
        type=int,
        default=0,
        metavar="N",
        help="N other sweeps share the device (recorded in each row; a problem that runs out "
        "of memory then is run again by --resume); default 0",
    )
    parser.add_argument(
        "--work-dir",
        type=Path,
        metavar="DIR",
        help="where the case files go (default: the system temp)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    # SIGTERM as SIGINT: the sweep ends through its finally blocks, workers stopped, rows kept.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.table:
        rows = [SweepRow(**row) for path in args.table for row in json.loads(path.read_text())]
        print(table(rows))
        print()
        print(summary(rows))
        return
    rows = sweep(args)
    print()
    print(summary(rows))


if __name__ == "__main__":
    main()
