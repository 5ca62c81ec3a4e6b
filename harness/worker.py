"""Worker process entry point: ``python -m harness.worker JOB_DIR``.

Reads ``job.json``, runs one job, writes ``report.json`` (or ``user_error.json`` when the user's
reference or inputs are at fault). Anything else that goes wrong ends the process with a
traceback in its log, which the parent reports.
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

from harness.errors import UserError
from harness.jobs import CandidateReport, ReferenceReport, UserErrorReport, WorkerJob
from harness.sandbox import network_isolated


def device_name(device: str) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _ask_parent(job_dir: Path) -> bool:
    (job_dir / "checkpoint").touch()
    return sys.stdin.readline().strip() == "go"


def main(job_dir: Path) -> int:
    job = WorkerJob.model_validate_json((job_dir / "job.json").read_text())
    report: ReferenceReport | CandidateReport
    try:
        if job.mode == "reference":
            from harness.worker_reference import run_reference

            report = run_reference(job, job_dir)
        else:
            from harness.worker_candidate import run_build, run_evaluate

            if job.mode == "build":
                report = run_build(job, job_dir)
            else:
                report = run_evaluate(job, job_dir, lambda: _ask_parent(job_dir))
    except UserError as err:
        error = UserErrorReport(what=err.what, where=err.where, fix=err.fix)
        (job_dir / "user_error.json").write_text(error.model_dump_json())
        return 3
    report.device_name = device_name(job.problem.device)
    report.torch_version = torch.__version__
    if hasattr(report, "network_isolated"):
        report.network_isolated = network_isolated()
    (job_dir / "report.json").write_text(report.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
