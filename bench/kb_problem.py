"""One KernelBench problem of the sweep (bench/kb_sweep.py): its reference timed, then one
candidate (the copy one or the offline proposer's) evaluated, each step's peak device memory,
into its row; and the parallel prebuild of every problem's candidate before the sweep."""

from __future__ import annotations

import os
import re
import time
import traceback
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from bench.device_memory import MemoryPeak
from bench.kb_copy_candidate import copy_candidate
from bench.kb_sweep_rows import SweepRow
from harness.records import Candidate, Problem

OOM_TEXT = re.compile(r"[^\n]*(out of (device )?memory|OutOfMemoryError)[^\n]*", re.IGNORECASE)


def reference_kind(err: Exception) -> str:
    from harness.evaluate import WeakSpecError

    if isinstance(err, WeakSpecError):
        return "weak_spec"
    return "out_of_memory" if OOM_TEXT.search(str(err)) else "user_error"


def first_lines(text: str, lines: int = 4) -> str:
    return "\n".join(text.strip().splitlines()[:lines])


# Offline proposals at once: each runs in a sandboxed worker of its own that holds the
# problem's inputs at the published size on the CPU, up to the worker's memory limit
# (eval.memory_limit_gb, 16 GiB): at most this many, and no more than the machine's memory holds.
PROPOSALS_AT_ONCE = 4


def proposals_at_once() -> int:
    from harness.config import EvalConfig

    memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    fit = int(memory_gb // EvalConfig().memory_limit_gb)
    return max(1, min(PROPOSALS_AT_ONCE, fit))


@dataclass(frozen=True)
class Made:
    """A problem's candidate for the sweep. ``kind``: copy, offline, none (the offline
    proposer has nothing to offer; ``reason`` says why, in its words), or failed (the proposer
    failed; ``reason`` says how)."""

    kind: str
    candidate: Candidate | None
    reason: str = ""
    problem: Problem | None = None  # as read for it, for the build and the evaluation after


def make_candidate(path: Path, problem, kind: str) -> Made:
    """The offline proposer's candidate (or its reason for none), or the copy one."""
    if kind == "offline":
        from agents.offline import propose

        proposal = propose(problem)
        kind = "offline" if proposal.candidate else "none"
        return Made(kind, proposal.candidate, proposal.reason, problem)
    source = copy_candidate(path.read_text(), problem.class_name, problem.device)
    return Made("copy", Candidate(source=source, origin="kb_sweep"), problem=problem)


def made_one(path: Path, kind: str, device: str) -> Made | str:
    """One problem's candidate. A problem that cannot be read gets the error's first lines
    instead; one the proposer (or the copy candidate's writer) fails on, a ``failed``
    candidate saying how, and the sweep goes on."""
    from harness.errors import UserError
    from harness.problem.load import problem_from_target

    try:
        problem = problem_from_target(str(path), device, "float32")
    except UserError as err:
        return first_lines(str(err))
    try:
        return make_candidate(path, problem, kind)
    except UserError as err:  # the module's error, as the proposer's worker saw it
        return Made("failed", None, first_lines(str(err)), problem)
    except Exception:  # a bug of ours: kept in the row, as sweep_problem keeps its own
        return Made("failed", None, traceback.format_exc()[-1500:], problem)


def made_for(files: list[Path], kind: str, device: str) -> Iterator[tuple[Path, Made | str]]:
    """Every problem's candidate (``made_one``), in order as they come, the offline proposals
    ``proposals_at_once()`` at a time."""
    at_once = proposals_at_once() if kind == "offline" else 1
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        yield from zip(
            files, pool.map(lambda path: made_one(path, kind, device), files), strict=True
        )


def prebuild(evaluator, files: list[Path], kind: str, device: str) -> dict[Path, Made]:
    """Make every problem's candidate, then build them before the sweep, as many at once as
    there are cores (the build cache keeps them): one problem after another, each offline
    candidate's build took most of its time. A problem that cannot be read is left to its
    turn, which says why. Gives each problem's candidate, for its turn."""
    started = time.monotonic()
    made = {path: m for path, m in made_for(files, kind, device) if isinstance(m, Made)}
    jobs = [(m.problem, m.candidate) for m in made.values() if m.candidate is not None]
    proposed = time.monotonic()
    workers = max(1, len(os.sched_getaffinity(0)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        reports = list(pool.map(lambda job: evaluator.build(*job), jobs))
    built = sum(report.status is None for report in reports)
    print(
        f"{len(jobs)} candidates of {len(files)} problems in {proposed - started:.0f} s; "
        f"prebuilt {built}, {workers} at a time, in {time.monotonic() - proposed:.0f} s",
        flush=True,
    )
    return made


def proposal_row(row: SweepRow, made: Made | str) -> None:
    """Fill ``row`` in from the offline proposer's answer alone (nothing run on the device):
    ``proposed`` or ``no_candidate`` with its reason, ``proposer_error``, or the problem's
    error."""
    if isinstance(made, str):
        row.reference_status, row.reference_message = "user_error", made
        return
    row.reference_status = "not_run"
    row.candidate_kind = made.kind
    if made.kind == "failed":
        row.candidate_status = "proposer_error"
    else:
        row.candidate_status = "proposed" if made.candidate is not None else "no_candidate"
    row.candidate_reason = made.reason[:300]


def sweep_problem(
    evaluator,
    path: Path,
    kind: str,
    memory: MemoryPeak,
    row: SweepRow,
    prepared: dict[Path, Made],
) -> None:
    """Fill ``row`` in: reference + audit, then one candidate. With the offline proposer, a
    problem it has no candidate for runs nothing on the device: its row says why."""
    from harness.errors import UserError
    from harness.problem.load import problem_from_target

    made: Made | str | None = prepared.get(path)
    if kind == "offline":
        made = made or made_one(path, kind, row.device)
        if isinstance(made, str) or made.candidate is None:
            proposal_row(row, made)
            return
    row.idle_mib = memory.now()
    memory.take()
    start = time.perf_counter()
    problem = None
    try:
        made_problem = made.problem if isinstance(made, Made) else None
        problem = made_problem or problem_from_target(str(path), row.device, "float32")
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
                if not isinstance(made, Made) or made.candidate is None:
                    made = make_candidate(path, problem, kind)
                row.candidate_kind = made.kind
                result = evaluator.evaluate(problem, made.candidate)
                row.candidate_status, row.candidate_reason = result.status.value, result.reason
                row.candidate_phases = {k: round(v, 2) for k, v in result.phase_seconds.items()}
                row.speedup_vs_eager = result.speedup_vs_eager
                row.speedup_vs_compile = result.speedup_vs_compile
                row.kernel_breakdowns = {"candidate": result.time_breakdown}
                row.kernel_breakdowns.update(result.baseline_breakdowns)
                row.device_us = dict(result.device_us)
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
