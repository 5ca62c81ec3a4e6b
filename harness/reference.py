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
from harness.jobs import INPUTS_FILE, OUTPUTS_FILE, ReferenceReport, WorkerJob
from harness.records import Problem
from harness.sandbox import WorkerOutcome, run_worker


@dataclass
class ReferenceData:
    """The verification cases of one problem; outputs never leave the parent.

    ``cases`` hold each case's name and reference outputs; ``inputs_file`` holds the cases
    without outputs, as candidate workers get them (linked into each one's job directory).
    """

    report: ReferenceReport
    cases: list[dict]
    seeds: list[int]
    inputs_file: Path


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
) -> ReferenceData:
    config = config or EvalConfig()
    seeds = draw_seeds(config, seed)
    job = WorkerJob(
        mode="reference",
        problem=problem,
        config=config,
        cache_dir=config.cache_dir or default_cache_dir(),
        seeds=seeds,
    )
    job_dir = Path(tempfile.mkdtemp(prefix="reference-", dir=work_dir))
    (job_dir / "job.json").write_text(job.model_dump_json())
    # The reference is the user's own code: no memory limit beyond the machine's.
    outcome = run_worker(job_dir, config.run_timeout_s, None, isolate_network=False)
    report = ReferenceReport.model_validate(_result(outcome, problem))
    cases_file = job_dir / OUTPUTS_FILE
    cases = torch.load(cases_file, weights_only=True)["cases"]
    cases_file.unlink()  # the reference outputs live in this process only
    return ReferenceData(report=report, cases=cases, seeds=seeds, inputs_file=job_dir / INPUTS_FILE)


def _result(outcome: WorkerOutcome, problem: Problem) -> dict:
    """The reference worker's report, or a UserError that says what happened."""
    results = outcome.results()
    if len(results) == 1 and results[0]["kind"] == "user_error":
        raise UserError(**results[0]["body"])
    if len(results) == 1 and outcome.returncode == 0:
        return results[0]["body"]
    if outcome.timed_out:
        raise UserError(
            f"the reference run took longer than {outcome.seconds:.0f} s",
            where=f"{problem.source_path}:{problem.class_name}",
            fix="use smaller inputs, or raise eval.run_timeout_s in [tool.kernelpilot]",
        )
    raise UserError(
        f"the reference run failed ({outcome.signal_name or f'exit {outcome.returncode}'}):\n"
        f"{outcome.log_tail[-3000:]}",
        where=f"{problem.source_path}:{problem.class_name}",
        fix="run the module on its inputs by hand to see the failure",
    )
