"""A candidate's timing worker starts beside its checks and times only after them
(harness.prestart): its untimed start overlaps the untimed checks, never a timing window."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

import harness.candidate_workers as candidate_workers
import harness.judge.baseline as baseline
import harness.prestart as prestart
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import AuditReport, Candidate, Status
from harness.sandbox import lifetime
from harness.sandbox.environment import INDUCTOR_SEED
from harness.sandbox.jobs import ReferenceReport, WorkerJob
from tests.conftest import FIXTURES, fast_config

PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
HONEST = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
HOOKS = Path(__file__).resolve().parent / "probe_hooks"
LOADED = "KP-CANDIDATE-LOADED"


def _spy_on_prestarts(monkeypatch) -> list:
    """The processes of the timing workers started beside their checks, as they start."""
    started: list = []
    real = prestart.start_worker

    def start(*args, **kwargs):
        process, reader = real(*args, **kwargs)
        started.append((process, time.time()))
        return process, reader

    monkeypatch.setattr(prestart, "start_worker", start)
    return started


def _with_hooks(monkeypatch, **variables: str) -> None:
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HOOKS), os.environ.get("PYTHONPATH", "")])
    )
    for name, value in variables.items():
        monkeypatch.setenv(name, value)


def test_the_timing_worker_starts_during_the_checks_and_times_only_after_them(
    tmp_path, monkeypatch
):
    """The timing worker is started before the checks' worker ends, and its first timing loop
    begins only after the parent has the checks' verdict (here held back 3 s more): a worker
    that timed as soon as it was ready would have timed beside the checks."""
    records = tmp_path / "records"
    _with_hooks(monkeypatch, KP_PROBE_SAMPLES=str(records))
    # The probe hooks write their records outside the worker: no sandbox for this instrument
    # (its worker's pid is then the process's own).
    evaluator = Evaluator(fast_config(sandbox="off"), seed=1, work_dir=tmp_path / "work")
    started = _spy_on_prestarts(monkeypatch)
    checked: list[float] = []
    real_run = evaluator.workers.run

    def run(problem, candidate, mode, *rest, **kwargs):
        report = real_run(problem, candidate, mode, *rest, **kwargs)
        if mode == "evaluate":
            time.sleep(3)  # the parent's comparison of the outputs, taken slowly
            checked.append(time.time())
        return report

    monkeypatch.setattr(evaluator.workers, "run", run)
    result = evaluator.evaluate(PROBLEM, HONEST)
    assert result.status in (Status.ok, Status.unjudged), result.reason
    [(process, at)] = started
    assert len(checked) == 1 and at < checked[0]
    loops = [json.loads(path.read_text()) for path in records.glob("*.json")]
    loops = [loop for loop in loops if "loop" in loop and loop["pid"] == process.pid]
    assert {loop["loop"] for loop in loops} == {"settle", "alone", "beside", "after"}
    assert min(loop["began"] for loop in loops) > checked[0]


def test_a_candidate_that_fails_its_checks_is_never_loaded_for_timing(tmp_path):
    """Checks that fail end the prestarted timing worker unread: the candidate's code ran in
    the checks' worker only, and no worker is left running."""
    running = lifetime.live_workers()
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
    assert lifetime.live_workers() == running


def test_a_timing_worker_that_ends_before_it_is_ready_is_no_verdict(tmp_path, monkeypatch):
    """What ends a prestarted worker before it is ready (out of memory beside the checks'
    worker) happened before any code of the candidate's ran there: the candidate is timed in
    a fresh worker, and judged there."""
    _with_hooks(monkeypatch, KP_PROBE_END_BEFORE_READY="1")
    evaluator = Evaluator(fast_config(sandbox="off"), seed=1, work_dir=tmp_path)
    started = _spy_on_prestarts(monkeypatch)
    result = evaluator.evaluate(PROBLEM, HONEST)
    assert result.status in (Status.ok, Status.unjudged), result.reason
    [(process, _)] = started
    assert process.returncode == 3  # it did end before it was ready
    assert len(list(tmp_path.glob("time-*"))) >= 2  # and a fresh one timed the candidate


def test_a_first_compile_on_cuda_waits_for_the_go(tmp_path, monkeypatch):
    """Inductor times kernel configurations when it first compiles on cuda: that compile comes
    after the go, with the checks' worker gone. Loading the target's compiled baseline, and
    compiling on cpu (no timing), come before it."""
    seed = tmp_path / "seed"
    monkeypatch.setattr(
        baseline, "seed_compiled_baseline", lambda *args: {INDUCTOR_SEED: str(seed)}
    )
    evaluator = Evaluator(fast_config(compile_baseline=True), seed=1, work_dir=tmp_path)
    data = evaluator.reference(PROBLEM)
    on_cuda = PROBLEM.model_copy(update={"device": "cuda"})

    def before_go(problem) -> bool:
        launch = evaluator.workers.launch(problem, HONEST, "time", data, None, await_go=True)
        return WorkerJob.model_validate_json(
            (launch.job_dir / "job.json").read_text()
        ).compile_before_go

    assert before_go(PROBLEM)  # cpu
    assert not before_go(on_cuda)  # its first timing worker compiles
    assert before_go(on_cuda)  # the next ones load the compiled baseline


@pytest.mark.parametrize("why", ["setting", "memory"])
def test_off_or_short_of_gpu_memory_the_timing_worker_starts_after_the_checks(
    tmp_path, monkeypatch, why
):
    """``eval.prestart_timing = false``, or a cuda reference that used more than a sixth of
    its GPU's memory: no worker is started before the checks end."""
    if why == "memory":
        monkeypatch.setattr(candidate_workers, "fits_beside", lambda device, report: False)
    config = fast_config(prestart_timing=why != "setting")
    evaluator = Evaluator(config, seed=1, work_dir=tmp_path)
    started = _spy_on_prestarts(monkeypatch)
    result = evaluator.evaluate(PROBLEM, HONEST)
    assert result.status in (Status.ok, Status.unjudged), result.reason
    assert started == [] and "waited" not in result.phase_seconds


def test_a_timing_worker_fits_beside_the_checks_where_the_reference_used_a_sixth_of_the_gpu():
    def report(**memory) -> ReferenceReport:
        audit = AuditReport(problem=PROBLEM.name, weak=False)
        return ReferenceReport(audit=audit, strengthened=False, **memory)

    gib = 2**30
    assert prestart.fits_beside("cpu", report())
    assert prestart.fits_beside(
        "cuda", report(peak_device_bytes=10 * gib, device_total_bytes=60 * gib)
    )
    assert not prestart.fits_beside(
        "cuda", report(peak_device_bytes=11 * gib, device_total_bytes=60 * gib)
    )
    assert not prestart.fits_beside("cuda", report())  # not known: not risked
