"""A candidate's timing worker starts beside its checks and times only after them
(harness.prestart): its untimed start overlaps the untimed checks, never a timing window."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import harness.prestart as prestart
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import AuditReport, Candidate, Status
from harness.sandbox import lifetime
from harness.sandbox.jobs import ReferenceReport
from tests.conftest import FIXTURES, fast_config

PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
HOOKS = Path(__file__).resolve().parent / "probe_hooks"
LOADED = "KP-CANDIDATE-LOADED"


def test_the_timing_worker_starts_during_the_checks_and_times_only_after_them(
    tmp_path, monkeypatch
):
    """The timing worker is started before the checks' worker ends, and its first timing loop
    begins only after the parent has the checks' verdict (here held back 3 s more): a worker
    that timed as soon as it was ready would have timed beside the checks."""
    records = tmp_path / "records"
    monkeypatch.setenv("KP_PROBE_SAMPLES", str(records))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HOOKS), os.environ.get("PYTHONPATH", "")])
    )
    # The probe hooks write their records outside the worker: no sandbox for this instrument.
    evaluator = Evaluator(fast_config(sandbox="off"), seed=1, work_dir=tmp_path / "work")
    started: list[float] = []
    checked: list[float] = []
    real_start, real_run = prestart.start_worker, evaluator.workers.run

    def start(*args, **kwargs):
        started.append(time.time())
        return real_start(*args, **kwargs)

    def run(problem, candidate, mode, *rest, **kwargs):
        report = real_run(problem, candidate, mode, *rest, **kwargs)
        if mode == "evaluate":
            time.sleep(3)  # the parent's comparison of the outputs, taken slowly
            checked.append(time.time())
        return report

    monkeypatch.setattr(prestart, "start_worker", start)
    monkeypatch.setattr(evaluator.workers, "run", run)
    honest = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
    result = evaluator.evaluate(PROBLEM, honest)
    assert result.status is Status.ok, result.reason
    assert len(started) == 1 and len(checked) == 1 and started[0] < checked[0]
    loops = [json.loads(path.read_text()) for path in records.glob("*.json")]
    loops = [loop for loop in loops if "loop" in loop]
    assert {loop["loop"] for loop in loops} == {"settle", "alone", "beside", "after"}
    assert min(loop["began"] for loop in loops) > checked[0]
    assert "waited" in result.phase_seconds  # it was ready before its go


def test_a_candidate_that_fails_its_checks_is_never_loaded_for_timing(tmp_path):
    """Checks that fail end the prestarted timing worker unread: the candidate's code ran in
    the checks' worker only, and no worker is left running."""
    evaluator = Evaluator(fast_config(), seed=1, work_dir=tmp_path)
    source = (FIXTURES / "isolation_wrong.py").read_text()
    wrong = Candidate(source=f"print({LOADED!r}, flush=True)\n{source}")
    result = evaluator.evaluate(PROBLEM, wrong)
    assert result.status is Status.incorrect, result.reason
    logs = {
        path.parent.name.split("-")[0]: path.read_text() for path in tmp_path.glob("*/worker.log")
    }
    assert LOADED in logs["evaluate"]
    assert "time" in logs and LOADED not in logs["time"]  # started beside the checks, unread
    ends = time.monotonic() + 30
    while lifetime.live_workers() and time.monotonic() < ends:
        time.sleep(0.1)
    assert lifetime.live_workers() == 0


def test_off_or_short_of_gpu_memory_the_timing_worker_starts_after_the_checks(
    tmp_path, monkeypatch
):
    """``eval.prestart_timing = false``, or a cuda reference that used more than a sixth of
    its GPU's memory: no worker is started before the checks end."""
    assert prestart.fits_beside("cpu", ReferenceReport(audit=_audit(), strengthened=False))
    on_gpu = {"audit": _audit(), "strengthened": False, "device_total_bytes": 60 * 2**30}
    assert prestart.fits_beside("cuda", ReferenceReport(**on_gpu, peak_device_bytes=10 * 2**30))
    assert not prestart.fits_beside("cuda", ReferenceReport(**on_gpu, peak_device_bytes=11 * 2**30))
    assert not prestart.fits_beside("cuda", ReferenceReport(audit=_audit(), strengthened=False))
    evaluator = Evaluator(fast_config(prestart_timing=False), seed=1, work_dir=tmp_path)
    monkeypatch.setattr(prestart, "start_worker", lambda *args: _fail("a timing worker prestarted"))
    honest = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
    result = evaluator.evaluate(PROBLEM, honest)
    assert result.status is Status.ok, result.reason
    assert "waited" not in result.phase_seconds


def _audit() -> AuditReport:
    return AuditReport(problem=PROBLEM.name, weak=False)


def _fail(why: str):
    raise AssertionError(why)
