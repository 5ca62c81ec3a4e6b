"""Parent side of the reference worker: run it, read back the cases and the audit."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.buildcache import default_cache_dir
from harness.config import EvalConfig
from harness.errors import UserError
from harness.jobs import ReferenceReport, UserErrorReport, WorkerJob
from harness.records import Problem
from harness.sandbox import WorkerOutcome, run_worker


@dataclass
class ReferenceData:
    """The verification cases of one problem; outputs never leave the parent."""

    report: ReferenceReport
    cases: list[dict]
    seeds: list[int]
    timing_seed: int


def draw_seeds(config: EvalConfig, seed: int | None) -> tuple[list[int], int]:
    """Seeds for the correctness cases and the timing inputs: random unless ``seed`` is given."""
    rng = random.Random(seed if seed is not None else random.SystemRandom().randrange(2**31))
    seeds = rng.sample(range(1, 2**31 - 1), config.seeds)
    return seeds, rng.randrange(1, 2**31 - 1)


def reference_data(
    problem: Problem,
    config: EvalConfig | None = None,
    seed: int | None = None,
    work_dir: Path | None = None,
) -> ReferenceData:
    config = config or EvalConfig()
    seeds, timing_seed = draw_seeds(config, seed)
    job = WorkerJob(
        mode="reference",
        problem=problem,
        config=config,
        cache_dir=config.cache_dir or default_cache_dir(),
        seeds=seeds,
        timing_seed=timing_seed,
    )
    job_dir = Path(tempfile.mkdtemp(prefix="reference-", dir=work_dir))
    (job_dir / "job.json").write_text(job.model_dump_json())
    # The reference is the user's own code: no memory limit beyond the machine's.
    outcome = run_worker(job_dir, config.run_timeout_s, None, isolate_network=False)
    raise_user_error(job_dir, outcome, problem)
    report = ReferenceReport.model_validate_json((job_dir / "report.json").read_text())
    cases = torch.load(job_dir / "reference.pt", weights_only=True)["cases"]
    return ReferenceData(report=report, cases=cases, seeds=seeds, timing_seed=timing_seed)


def raise_user_error(job_dir: Path, outcome: WorkerOutcome, problem: Problem) -> None:
    """Turn a failed reference run into a UserError that says what happened."""
    error_file = job_dir / "user_error.json"
    if error_file.exists():
        error = UserErrorReport.model_validate_json(error_file.read_text())
        raise UserError(error.what, where=error.where, fix=error.fix)
    if outcome.timed_out:
        raise UserError(
            f"the reference run took longer than {outcome.seconds:.0f} s",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="use smaller inputs, or raise eval.run_timeout_s in [tool.kernelpilot]",
        )
    if outcome.returncode != 0 or not (job_dir / "report.json").exists():
        raise UserError(
            f"the reference run failed ({outcome.signal_name or f'exit {outcome.returncode}'}):\n"
            f"{outcome.log_tail[-3000:]}",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="run the module on its inputs by hand to see the failure",
        )
