"""The measurement of ``python -m bench reference`` (bench/bench_reference.py, where the
yardstick is defined): one problem's reference, run ``--repeat`` times, with its peak device
memory, against the goal of its yardstick (bench/kb_yardstick.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import REPO_ENV
from bench.device_memory import MemoryPeak
from bench.kb_yardstick import run_yardstick

ROOT = Path(__file__).resolve().parent.parent
MIB = 2**20


def harness_root() -> Path:
    """The checkout whose harness is measured: --repo's DIR in the command run again for it,
    else this one."""
    return Path(os.environ.get(REPO_ENV) or ROOT)


# The harness is imported where it is used: --help and --compare work whatever state the
# measured checkout is in.


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
