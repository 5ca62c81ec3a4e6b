"""Parent side of the baseline worker: eager and ``torch.compile`` of a problem's reference
timed with no candidate (the nightly job's configured targets that ship no kernel).

The worker runs only the user's own code, as the reference worker does: no memory limit
beyond the machine's, and the network is left alone. What goes wrong in it is the user's
module or inputs (or torch.compile of them), so it comes back as a UserError that says what
happened, where, and what to do; a torch.compile that fails is no error, the report says why.

The machine's load is judged as a candidate's is (``harness.judge.busy``): calls kept waiting
for a core while other processes were busy are left out, and a window too busy to judge is
timed again in a fresh worker up to ``busy_retries`` times, then reported as not judged
(``BaselineReport.unjudged``), never as a time.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from harness.builds.cache import default_cache_dir
from harness.config import EvalConfig
from harness.errors import UserError
from harness.gpus import environment
from harness.judge.busy import TOO_BUSY, baseline_window, each_worker, not_judged
from harness.problem.reference import draw_seeds, worker_result
from harness.records import Problem
from harness.sandbox.bubblewrap import problem_view
from harness.sandbox.environment import INDUCTOR_SEED
from harness.sandbox.jobs import BaselineReport, CompileReport, WorkerJob
from harness.sandbox.run import WorkerOutcome, run_worker


def time_baselines(
    problem: Problem,
    config: EvalConfig | None = None,
    seed: int | None = None,
    work_dir: Path | None = None,
    on_retry: Callable[[str], None] = lambda why: None,
) -> BaselineReport:
    """Eager (and ``torch.compile`` unless ``config.compile_baseline`` is off) of the reference,
    timed interleaved in one worker, again while the machine was too busy to judge; a
    UserError when the reference cannot be run."""
    config = config or EvalConfig()
    earlier: list[str] = []
    while True:
        report = _time_once(problem, config, seed, work_dir)
        eager, compiled, busy = baseline_window(report.eager, report.compiled, report.window)
        report.eager, report.compiled = eager, compiled
        if not busy:
            return report
        earlier.append("; ".join(busy))
        if len(earlier) > config.busy_retries:
            report.unjudged = not_judged(each_worker(earlier))
            return report
        on_retry(f"{TOO_BUSY}; timing again in a fresh worker")


def _time_once(
    problem: Problem, config: EvalConfig, seed: int | None, work_dir: Path | None
) -> BaselineReport:
    job = _job("baseline", problem, config, seed)  # the parameters' seed; inputs drawn live
    outcome = _run(job, work_dir)
    try:
        report = BaselineReport.model_validate(worker_result(outcome, problem))
    except UserError as err:
        raise UserError(
            f"timing eager and torch.compile without a kernel: {err.what}", err.where, err.fix
        ) from None
    report.phase_seconds["worker"] = outcome.seconds
    report.unjudged = ""  # the parent's to say, not the worker's
    return report


def _job(mode: Literal["baseline", "compile"], problem: Problem, config: EvalConfig,
         seed: int | None) -> WorkerJob:  # fmt: skip
    return WorkerJob(
        mode=mode,
        problem=problem,
        config=config,
        cache_dir=config.cache_dir or default_cache_dir(),
        seeds=draw_seeds(config, seed)[:1],
    )


def _run(
    job: WorkerJob,
    work_dir: Path | None,
    writable: list[Path] | None = None,
    extra_env: dict[str, str] | None = None,
) -> WorkerOutcome:
    """Run ``job``'s worker (the reference's code only) in a job folder made and removed here."""
    job_dir = Path(tempfile.mkdtemp(prefix=f"{job.mode}-", dir=work_dir))
    try:
        (job_dir / "job.json").write_text(job.model_dump_json())
        view = problem_view(job.problem, job.cache_dir, writable=writable)
        return run_worker(job_dir, job.config.run_timeout_s, None, view, job.config.sandbox,
                          extra_env=extra_env)  # fmt: skip
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def seed_compiled_baseline(
    problem: Problem, config: EvalConfig, folder: Path, environment: dict[str, str] | None = None
) -> dict[str, str]:
    """Compile the target's ``torch.compile`` baseline once, in a worker of its own (the
    reference's code only, sandboxed, ``folder`` its Inductor cache), for its candidates'
    timing workers to start from: each gets a private copy and finds the baseline compiled
    (on 2 cores a sandboxed cpu evaluation spent 23-25 s of 36-40 s compiling it again).

    The environment a timing worker is given for it (``folder`` must also be shown to it,
    read-only); empty where there is nothing to share: compile off, no sandbox (workers then
    share torch's own cache), or the compile failed (each timing worker compiles, and says
    why it could not). ``environment``: the worker's additions (the GPU it may use)."""
    if not config.compile_baseline or config.sandbox != "bubblewrap":
        return {}
    folder.mkdir(parents=True, exist_ok=True)
    job = _job("compile", problem, config, None)
    env = {**(environment or {}), "TORCHINDUCTOR_CACHE_DIR": str(folder)}
    outcome = _run(job, folder.parent, [folder], env)
    try:
        report = CompileReport.model_validate(worker_result(outcome, problem))
    except UserError:  # the reference itself fails: its checks say so, with the details
        return {}
    return {} if report.error else {INDUCTOR_SEED: str(folder)}


class CompiledBaselines:
    """Per problem, the compiled baseline its timing workers start from. The first timing
    worker compiles torch.compile itself; from the second on, the baseline is compiled once
    more, in a worker of its own (``seed_compiled_baseline``), and every later timing worker
    starts from it: a target with one timing worker pays for one compile, and one with N for
    two, not N. A timing worker started beside its candidate's checks (``harness.prestart``)
    counts whether the checks then pass or not."""

    def __init__(self, config: EvalConfig, work_dir: Path, progress: Callable[[str], None]) -> None:
        self.config, self.work_dir, self.progress = config, work_dir, progress
        self._lock = threading.Lock()
        self._timed: dict[str, int] = {}  # timing workers asked for, by problem
        self._compiling: dict[str, threading.Lock] = {}
        self._seeds: dict[str, dict[str, str]] = {}

    def next_worker(self, problem: Problem, gpu: str | None) -> dict[str, str]:
        """The environment of the problem's next timing worker (on ``gpu``) for its compiled
        baseline; its ``INDUCTOR_SEED`` folder, if any, is to be shown to it read-only."""
        key = hashlib.sha256(problem.model_dump_json().encode()).hexdigest()[:16]
        with self._lock:
            self._timed[key] = self._timed.get(key, 0) + 1
            if self._timed[key] == 1:
                return {}
            compiling = self._compiling.setdefault(key, threading.Lock())
        with compiling:  # the other GPUs' workers go on meanwhile
            if key not in self._seeds:
                if self.config.compile_baseline and self.config.sandbox == "bubblewrap":
                    self.progress(f"{problem.name}: compiling the torch.compile baseline once")
                folder = self.work_dir / "compiled" / key
                self._seeds[key] = seed_compiled_baseline(
                    problem, self.config, folder, environment(gpu)
                )
            return self._seeds[key]
