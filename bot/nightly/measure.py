"""One benchmark of the night, measured and judged (``bot.nightly.run`` runs them all).

- A shipped kernel: stale when its class changed since it was verified (not measured); else
  verified in full against its current module and timed against eager and torch.compile.
  Its kernel's time is judged.
- A configured target that ships no kernel: missing when its file or class is gone; else
  eager and torch.compile of its module are timed, with no candidate (``harness.judge.baseline``).
  Both times are judged, each as its own series, and the worse verdict is the row's: eager
  is the user's module as it runs, and torch.compile's time moves with the module's code too
  (a new graph break shows there first), while a new torch version starts a new series of
  both. A night where torch.compile fails has no compiled time to judge: the row says why.

A night that looks slower is measured again in the same run before it is reported. A
benchmark the machine was too busy to time, every time it was timed (``harness.judge.busy``),
is "unjudged": no time is recorded or judged, and the night does not fail for it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bot.nightly.configured import ConfiguredTarget, missing
from bot.nightly.history import Record
from bot.nightly.regression import Night, RegressionConfig, Verdict, assess, worst
from bot.nightly.shipped import ShippedKernel, staleness
from harness.config import TableReader, kernelpilot_table
from harness.devices import device_name
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.files import read_user_text
from harness.judge.baseline import time_baselines
from harness.problem.load import problem_from_target
from harness.records import Candidate, EvalResult, Problem

Progress = Callable[[str], None]
BREAKING = ("stale", "missing", "failed", "fail")


class NightlyRow(BaseModel):
    benchmark: str
    status: str = Field(description="ok, stale, missing, failed, or the regression level.")
    reason: str = ""
    record: Record
    verdict: Verdict | None = None

    @property
    def failed(self) -> bool:
        """Reported in the issue: anything but ok (an alert too)."""
        return self.status in (*BREAKING, "alert")

    @property
    def breaks_night(self) -> bool:
        """Makes the nightly job fail: stale, missing, failed, or slower past the fail level."""
        return self.status in BREAKING


@dataclass
class Tonight:
    """What every benchmark of one night is measured with."""

    repo: Path
    device: str
    evaluator: Evaluator
    rule: RegressionConfig
    progress: Progress
    seed: int | None
    base: dict[str, Any]  # the fields every record of the night shares
    read: TableReader = kernelpilot_table  # a module's project, as the run reads it

    def record(self, benchmark: str, status: str, **fields: Any) -> Record:
        return Record(**{**self.base, **fields}, benchmark=benchmark, status=status)


def night_fields(night: str, commit: str, run_url: str, device: str) -> dict[str, Any]:
    """The fields of every record of the night, the machine setup included (stale ones too)."""
    import torch

    return {"night": night, "commit": commit, "run_url": run_url, "device": device,
            "device_name": device_name(device), "driver": _driver(), "torch": torch.__version__,
            "cuda": torch.version.cuda}  # fmt: skip


def kernel_row(tonight: Tonight, kernel: ShippedKernel, earlier: list[Record]) -> NightlyRow:
    stale = staleness(tonight.repo, kernel)
    if stale.stale:
        reason = f"stale: {stale.reason}" + (
            f" (commit {stale.commit[:12]})" if stale.commit else ""
        )
        tonight.progress(f"{kernel.path}: {reason}")
        return _row(tonight.record(kernel.benchmark, "stale", note=reason), "stale")
    try:
        result = _verified(tonight, kernel)
    except UserError as err:
        return _row(tonight.record(kernel.benchmark, "failed", note=err.render()), "failed")
    if result.status.value == "unjudged":  # the machine was too busy: no time, not a failure
        return _row(tonight.record(kernel.benchmark, "unjudged", note=result.reason), "unjudged")
    record = _kernel_record(tonight, kernel.benchmark, result)
    if result.status.value != "ok":
        record.note = f"no longer verified: {result.status.value}: {result.reason}"
        return _row(record, "failed")
    return judge(tonight, _row(record, "ok"), earlier,
                 lambda: _kernel_record(tonight, kernel.benchmark, _verified(tonight, kernel)))  # fmt: skip


def target_row(tonight: Tonight, target: ConfiguredTarget, earlier: list[Record]) -> NightlyRow:
    gone = missing(tonight.repo, target)
    if gone is not None:
        tonight.progress(f"{target.benchmark}: missing: {gone.what}")
        return _row(tonight.record(target.benchmark, "missing", note=gone.render()), "missing")
    try:
        record = _baseline_record(tonight, target)
    except UserError as err:
        if not err.where:  # the loader's own message may not say which entry it was
            err = UserError(err.what, target.where, err.fix)
        tonight.progress(f"{target.benchmark}: failed: {err.what}")
        return _row(tonight.record(target.benchmark, "failed", note=err.render()), "failed")
    if record.status == "unjudged":
        return _row(record, "unjudged")
    return judge(tonight, _row(record, "ok"), earlier, lambda: _baseline_record(tonight, target))


def judge(
    tonight: Tonight, row: NightlyRow, earlier: list[Record], again: Callable[[], Record]
) -> NightlyRow:
    """The row's verdict against its earlier ok nights: each of its measures, the worst one
    reported; when any looks slower, ``again()`` measures the benchmark once more first."""
    verdict = _assess(row.record, earlier, tonight.rule)
    if verdict.suspect:
        try:
            remeasured = again()
        except UserError as err:  # the first measurement stands, unconfirmed
            tonight.progress(f"{row.benchmark}: measuring again failed: {err.what}")
            remeasured = row.record.model_copy(update={"status": "failed"})
        if remeasured.status == "ok":
            measures = row.record.measures()
            for name, measure in remeasured.measures().items():
                if measure.median_ms is not None and measures[name].median_ms is not None:
                    measures[name].remeasured_ms.append(measure.median_ms)
        verdict = _assess(row.record, earlier, tonight.rule)
    row.verdict = verdict
    if verdict.level in ("alert", "fail"):
        row.status, row.reason = verdict.level, verdict.reason
    return row


def _assess(record: Record, earlier: list[Record], rule: RegressionConfig) -> Verdict:
    verdicts = []
    for name in record.measures():
        nights = [_night(r, name) for r in [*earlier, record] if r.status == "ok"]
        if nights[-1] is None:  # not timed tonight (torch.compile failed, or was off)
            continue
        verdict = assess([n for n in nights if n is not None], rule)
        if not record.has_kernel:
            verdict.reason = f"{name} {verdict.reason}"
        verdicts.append(verdict)
    return worst(verdicts) if verdicts else Verdict(level="too_few", reason="nothing timed")


def _night(record: Record, name: str) -> Night | None:
    measure = record.measures()[name]
    if measure.median_ms is None:
        return None
    return Night(setup=record.setup, times_ms=[measure.median_ms, *measure.remeasured_ms],
                 iqr_ms=measure.iqr_ms)  # fmt: skip


def _row(record: Record, status: str) -> NightlyRow:
    return NightlyRow(benchmark=record.benchmark, status=status, reason=record.note, record=record)


def _problem(tonight: Tonight, module_path: str, class_name: str) -> Problem:
    """The class at ``module_path`` in tonight's checkout, on tonight's device, read with
    tonight's project settings."""
    return problem_from_target(
        f"{tonight.repo / module_path}:{class_name}", tonight.device, None, tonight.read
    )


def _verified(tonight: Tonight, kernel: ShippedKernel) -> EvalResult:
    problem = _problem(tonight, kernel.module_path, kernel.class_name)
    source = read_user_text(tonight.repo / kernel.path, "shipped kernel")
    return tonight.evaluator.evaluate(problem, Candidate(source=source, origin="shipped"))


def _kernel_record(tonight: Tonight, benchmark: str, result: EvalResult) -> Record:
    timings = result.timings
    kernel, eager, compiled = timings.candidate, timings.eager_beside, timings.compiled_beside
    return tonight.record(
        benchmark,
        result.status.value,
        device_name=result.device_name or tonight.base["device_name"],
        time_ms=kernel.median_ms if kernel else None,
        iqr_ms=kernel.iqr_ms if kernel else 0.0,
        eager_ms=eager.median_ms if eager else None,
        eager_iqr_ms=eager.iqr_ms if eager else 0.0,
        compile_ms=compiled.median_ms if compiled else None,
        compile_iqr_ms=compiled.iqr_ms if compiled else 0.0,
    )


def _baseline_record(tonight: Tonight, target: ConfiguredTarget) -> Record:
    problem = _problem(tonight, target.module_path, target.class_name)
    config = tonight.evaluator.config
    timed = "eager and torch.compile" if config.compile_baseline else "eager"
    tonight.progress(f"{target.benchmark}: no shipped kernel: timing {timed}")
    report = time_baselines(
        problem, config, tonight.seed,
        on_retry=lambda why: tonight.progress(f"{target.benchmark}: {why}"),
    )  # fmt: skip
    if report.unjudged:
        tonight.progress(f"{target.benchmark}: {report.unjudged}")
        return tonight.record(target.benchmark, "unjudged", note=report.unjudged)
    compiled = report.compiled
    return tonight.record(
        target.benchmark,
        "ok",
        device_name=report.device_name or tonight.base["device_name"],
        eager_ms=report.eager.median_ms,
        eager_iqr_ms=report.eager.iqr_ms,
        compile_ms=compiled.median_ms if compiled else None,
        compile_iqr_ms=compiled.iqr_ms if compiled else 0.0,
        note=f"torch.compile failed: {report.compile_baseline_error}"
        if report.compile_baseline_error
        else "",
    )


def _driver() -> str:
    import torch

    if not torch.cuda.is_available():
        return ""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else ""
    except (OSError, subprocess.SubprocessError):
        return ""
