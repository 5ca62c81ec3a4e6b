"""Parent side of the reference worker: run it, read back the cases and the audit."""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import torch

from harness.builds.cache import default_cache_dir
from harness.config import EvalConfig
from harness.errors import HarnessError, UserError
from harness.records import Problem
from harness.sandbox.bubblewrap import problem_view
from harness.sandbox.jobs import (
    CaseSpec,
    HarnessErrorReport,
    ReferenceReport,
    UserErrorReport,
    WorkerJob,
    reference_file,
)
from harness.sandbox.run import WorkerOutcome, run_worker


@dataclass
class ReferenceData:
    """The verification cases of one problem; reference outputs never leave the parent.

    ``report.cases`` are the case specs candidate workers get (they draw the inputs again from
    the seeds). Each case's reference outputs sit in a file the parent opened and then
    removed from the file system: no other process can open it by name, and only one case's
    outputs are in memory at a time (``outputs``).
    """

    report: ReferenceReport
    seeds: list[int]
    files: dict[int, BinaryIO] = field(default_factory=dict)
    recomputed: bool = False  # no files: a comparator makes the outputs again per candidate
    _reading: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    @property
    def cases(self) -> list[CaseSpec]:
        return self.report.cases

    def outputs(self, spec: CaseSpec) -> list[torch.Tensor]:
        """The reference outputs of a case (loaded now, dropped by the caller after use). One
        reader at a time: candidates checked at once on several GPUs share the handles."""
        with self._reading:
            handle = self.files[spec.reference_case]
            handle.seek(0)
            return torch.load(handle, weights_only=True)


def draw_seeds(config: EvalConfig, seed: int | None) -> list[int]:
    """Seeds for the correctness cases: random unless ``seed`` is given.

    Timing inputs are not drawn here: the candidate worker draws a fresh seed for every timed
    call, at the moment of the call, so no timed input can be known in advance.
    """
    rng = random.Random(seed if seed is not None else random.SystemRandom().randrange(2**31))
    return rng.sample(range(1, 2**31 - 1), config.seeds)


def reference_data(
    problem: Problem,
    config: EvalConfig | None = None,
    seed: int | None = None,
    work_dir: Path | None = None,
    seeds: list[int] | None = None,
    extra_env: dict[str, str] | None = None,
) -> ReferenceData:
    """Run the reference worker: the cases, the audit, and (unless a comparator makes them
    again, ``config.recomputes``) each case's reference outputs. ``seeds`` (else drawn from
    ``seed``) are the correctness cases' seeds; ``extra_env``: the worker's environment's
    additions (the GPU it may use, ``harness.gpus.environment``)."""
    config = config or EvalConfig()
    seeds = seeds or draw_seeds(config, seed)
    job = WorkerJob(
        mode="reference",
        problem=problem,
        config=config,
        cache_dir=config.cache_dir or default_cache_dir(),
        seeds=seeds,
        recompute=config.recomputes(problem.device),
    )
    job_dir = Path(tempfile.mkdtemp(prefix="reference-", dir=work_dir))
    (job_dir / "job.json").write_text(job.model_dump_json())
    # On cpu under the candidates' workers' memory limit: each of them draws the same inputs
    # and runs the same reference, so a case that does not fit is said here, once.
    memory = config.memory_limit_gb if problem.device == "cpu" else None
    view = problem_view(problem, job.cache_dir)
    outcome = run_worker(
        job_dir, config.run_timeout_s, memory, view, config.sandbox, extra_env=extra_env
    )
    try:
        report = ReferenceReport.model_validate(worker_result(outcome, problem))
        data = ReferenceData(report=report, seeds=seeds, recomputed=job.recompute)
        for number in sorted({spec.reference_case for spec in report.cases}):
            if not data.recomputed:
                data.files[number] = (job_dir / reference_file(number)).open("rb")
    finally:
        # Open files stay readable here; by name no candidate worker can reach them.
        shutil.rmtree(job_dir, ignore_errors=True)
    report.phase_seconds["worker"] = outcome.seconds
    return data


def worker_result(outcome: WorkerOutcome, problem: Problem) -> dict:
    """The reference worker's report, a UserError that says what happened, or a HarnessError
    where kernelpilot's own code failed in it."""
    results = outcome.results()
    if len(results) == 1 and results[0].kind == "user_error":
        raise UserError(**UserErrorReport.model_validate(results[0].body).model_dump())
    failures = [message for message in results if message.kind == "harness_error"]
    if failures:
        what = HarnessErrorReport.model_validate(failures[0].body).what
        raise HarnessError(f"{what}\n--- the worker's log ends ---\n{outcome.log_tail[-3000:]}")
    if len(results) == 1 and outcome.returncode == 0 and results[0].kind == "report":
        return results[0].body
    if outcome.timed_out:
        raise UserError(
            f"the reference run took longer than {outcome.seconds:.0f} s",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="use smaller inputs, or raise eval.run_timeout_s in [tool.kernelpilot]",
        )
    how = outcome.signal_name or f"exit {outcome.returncode}"
    if outcome.signal_name == "SIGKILL":  # the kernel's out-of-memory killer, almost always
        raise UserError(
            f"the reference worker was killed (SIGKILL), most likely out of host memory: the "
            f"harness holds one case's inputs and outputs at a time, and this machine has "
            f"{_memory_gib():.1f} GiB",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="shrink the input shapes the input factory returns, or run on a machine with "
            "more memory",
        )
    raise UserError(
        f"the reference run failed ({how}):\n{outcome.log_tail[-3000:]}",
        where=f"{problem.source_path}:{problem.class_name}",
        fix="run the module on its inputs by hand to see the failure",
    )


def _memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
