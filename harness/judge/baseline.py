"""Parent side of the baseline worker: eager and ``torch.compile`` of a problem's reference
timed with no candidate (the nightly job's configured targets that ship no kernel).

The worker runs only the user's own code, as the reference worker does: no memory limit
beyond the machine's, and the network is left alone. What goes wrong in it is the user's
module or inputs (or torch.compile of them), so it comes back as a UserError that says what
happened, where, and what to do; a torch.compile that fails is no error, the report says why.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from harness.builds.cache import default_cache_dir
from harness.config import EvalConfig
from harness.errors import UserError
from harness.problem.reference import draw_seeds, worker_result
from harness.records import Problem
from harness.sandbox.bubblewrap import problem_view
from harness.sandbox.jobs import BaselineReport, WorkerJob
from harness.sandbox.run import run_worker


def time_baselines(
    problem: Problem,
    config: EvalConfig | None = None,
    seed: int | None = None,
    work_dir: Path | None = None,
) -> BaselineReport:
    """Eager (and ``torch.compile`` unless ``config.compile_baseline`` is off) of the reference,
    timed interleaved in one worker; a UserError when the reference cannot be run."""
    config = config or EvalConfig()
    job = WorkerJob(
        mode="baseline",
        problem=problem,
        config=config,
        cache_dir=config.cache_dir or default_cache_dir(),
        seeds=draw_seeds(config, seed)[:1],  # the parameters' seed; timed inputs are drawn live
    )
    job_dir = Path(tempfile.mkdtemp(prefix="baseline-", dir=work_dir))
    try:
        (job_dir / "job.json").write_text(job.model_dump_json())
        view = problem_view(problem, job.cache_dir)
        outcome = run_worker(job_dir, config.run_timeout_s, None, view, config.sandbox)
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)
    try:
        report = BaselineReport.model_validate(worker_result(outcome, problem))
    except UserError as err:
        raise UserError(
            f"timing eager and torch.compile without a kernel: {err.what}", err.where, err.fix
        ) from None
    report.phase_seconds["worker"] = outcome.seconds
    return report
