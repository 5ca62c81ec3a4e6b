"""One KernelBench problem of the sweep (bench/kb_sweep.py): its reference timed, then one
candidate (the copy one or the offline proposer's) evaluated, each step's peak device memory,
into its row; and the parallel prebuild of every problem's candidate before the sweep."""

from __future__ import annotations

import os
import re
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.device_memory import MemoryPeak
from bench.kb_copy_candidate import copy_candidate
from bench.kb_sweep_rows import SweepRow
from harness.records import Candidate

OOM_TEXT = re.compile(r"[^\n]*(out of (device )?memory|OutOfMemoryError)[^\n]*", re.IGNORECASE)


def reference_kind(err: Exception) -> str:
    from harness.evaluate import WeakSpecError

    if isinstance(err, WeakSpecError):
        return "weak_spec"
    return "out_of_memory" if OOM_TEXT.search(str(err)) else "user_error"


def first_lines(text: str, lines: int = 4) -> str:
    return "\n".join(text.strip().splitlines()[:lines])


def make_candidate(path: Path, problem, kind: str) -> tuple[str, Candidate]:
    """The offline proposer's candidate where asked for and it has one, else the copy one."""
    if kind == "offline":
        from agents.offline import propose

        proposal = propose(problem)
        if proposal.candidate is not None:
            return "offline", proposal.candidate
    source = copy_candidate(path.read_text(), problem.class_name, problem.device)
    return "copy", Candidate(source=source, origin="kb_sweep")


def prebuild(
    evaluator, files: list[Path], kind: str, device: str
) -> dict[Path, tuple[str, Candidate]]:
    """Build every problem's candidate before the sweep, as many at once as there are cores
    (the build cache keeps them): one problem after another, each offline candidate's build
    took most of its time. A problem that cannot be read is left to its turn, which says why.
    Gives each problem's (kind, candidate), for its turn."""
    from harness.errors import UserError
    from harness.problem.load import problem_from_target

    jobs = []
    for path in files:
        try:
            problem = problem_from_target(str(path), device, "float32")
            jobs.append((path, problem, make_candidate(path, problem, kind)))
        except UserError:
            continue
    started = time.monotonic()
    workers = max(1, len(os.sched_getaffinity(0)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        reports = list(pool.map(lambda job: evaluator.build(job[1], job[2][1]), jobs))
    built = sum(report.status is None for report in reports)
    print(
        f"prebuilt {built} of {len(jobs)} candidates, {workers} at a time, "
        f"in {time.monotonic() - started:.0f} s",
        flush=True,
    )
    return {path: made for path, _, made in jobs}


def sweep_problem(
    evaluator,
    path: Path,
    kind: str,
    memory: MemoryPeak,
    row: SweepRow,
    prepared: dict[Path, tuple[str, Candidate]],
) -> None:
    """Fill ``row`` in: reference + audit, then one candidate."""
    from harness.errors import UserError
    from harness.problem.load import problem_from_target

    row.idle_mib = memory.now()
    memory.take()
    start = time.perf_counter()
    problem = None
    try:
        problem = problem_from_target(str(path), row.device, "float32")
        evaluator.reference(problem)
        row.reference_status = "ok"
    except UserError as err:
        row.reference_status, row.reference_message = reference_kind(err), first_lines(str(err))
    except Exception:  # a harness bug: recorded, and the sweep goes on to the next problem
        row.reference_status = "harness_error"
        row.reference_message = traceback.format_exc()[-1500:]
    row.reference_s = time.perf_counter() - start
    row.peak_reference_mib, row.own_peak_reference_mib = memory.take()
    try:
        if row.reference_status == "ok" and problem is not None:
            start = time.perf_counter()
            row.candidate_status = "interrupted"  # until the verdict comes
            try:
                made = prepared.get(path) or make_candidate(path, problem, kind)
                row.candidate_kind, candidate = made
                result = evaluator.evaluate(problem, candidate)
                row.candidate_status, row.candidate_reason = result.status.value, result.reason
                row.candidate_phases = {k: round(v, 2) for k, v in result.phase_seconds.items()}
                row.speedup_vs_eager = result.speedup_vs_eager
                row.speedup_vs_compile = result.speedup_vs_compile
                row.kernel_breakdowns = {"candidate": result.time_breakdown}
                row.kernel_breakdowns.update(result.baseline_breakdowns)
                row.memory_error = "\n".join(
                    m.group(0) for m in OOM_TEXT.finditer(f"{result.reason}\n{result.log}")
                )[:1500]
            except UserError as err:
                row.candidate_status, row.candidate_reason = "user_error", str(err)
            except Exception:
                row.candidate_status = "harness_error"
                row.candidate_reason = traceback.format_exc()[-1500:]
            row.candidate_s = time.perf_counter() - start
            row.candidate_reason = row.candidate_reason[:300]
            row.peak_candidate_mib, row.own_peak_candidate_mib = memory.take()
    finally:
        if problem is not None:
            evaluator.release(problem)
    if row.reference_status == "out_of_memory":
        row.memory_error = row.reference_message
    elif not row.memory_error and OOM_TEXT.search(row.candidate_reason):
        row.memory_error = row.candidate_reason
