"""Worker process entry point: ``python -m harness.sandbox.worker JOB_DIR CHANNEL_FD``.

Reads ``job.json`` (and deletes it: nothing the candidate could read back), runs one job and
sends its result on the channel, a pipe the parent gave it: a ``report`` message, a
``user_error`` message when the user's reference or inputs are at fault, or a
``harness_error`` message when kernelpilot's own code raised (``harness.sandbox.blame``). Then it
ends with ``os._exit``: no exit handler registered by candidate code runs after the result is
sent. Anything else that goes wrong (the candidate's code or the module's raised) ends the
process with a traceback in its log, and no result.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path
from typing import TextIO

import torch

from harness.builds.store import BuildSpec, Built
from harness.devices import device_name
from harness.errors import KERNELPILOT_BUG, UserError
from harness.sandbox.blame import raised_by_kernelpilot
from harness.sandbox.environment import INDUCTOR_SEED
from harness.sandbox.jobs import (
    BaselineReport,
    CandidateReport,
    CompileReport,
    Go,
    HarnessErrorReport,
    ReferenceReport,
    UserErrorReport,
    WorkerJob,
)
from harness.sandbox.limits import network_isolated
from harness.workers import timing


def send(channel: TextIO, kind: str, body: dict) -> None:
    channel.write(json.dumps({"kind": kind, "body": body}) + "\n")
    channel.flush()


def _outputs_ready(channel: TextIO, body: dict) -> bool:
    """Tell the parent that a case's outputs are ready (``harness.workers.handover``); it answers
    whether to go on."""
    send(channel, "outputs", body)
    return sys.stdin.readline().strip() == "go"


def _timing_window(channel: TextIO, opened: bool) -> None:
    """Tell the parent a timing window opens or closes: it stops its builds meanwhile
    (``harness.sandbox.quiet``), and says when they are stopped."""
    send(channel, "timing", {"open": opened})
    if opened:
        sys.stdin.readline()


def _build_by_parent(channel: TextIO, spec: BuildSpec, key: str) -> Built:
    """Ask the parent for a build (``harness.builds.requests``); the cache is read-only here."""
    send(channel, "build", spec.model_dump(mode="json"))
    line = sys.stdin.readline()
    if not line:
        return Built(key=key, error="the parent did not answer the build request")
    return Built.model_validate_json(line)


def _await_go(channel: TextIO) -> Go:
    """A prestarted timing worker's wait (``harness.prestart``): it says it is ready (what
    failed before this is never the candidate's doing), and the parent's go comes as a line on
    stdin once the candidate's checks passed. No line: the parent dropped this worker (the
    checks failed), and it ends without a word."""
    send(channel, "ready", {})
    line = sys.stdin.readline()
    if not line:
        os._exit(0)
    return Go.model_validate_json(line)


def run(job: WorkerJob, job_dir: Path, channel: TextIO) -> tuple[str, dict]:
    report: ReferenceReport | CandidateReport | BaselineReport | CompileReport
    timing.WINDOW_LISTENERS.append(lambda opened: _timing_window(channel, opened))
    try:
        if job.mode == "reference":
            from harness.workers.reference import run_reference

            report = run_reference(job, job_dir)
        elif job.mode == "compare":
            from harness.workers.compare import run_compare

            run_compare(job, lambda kind, body: send(channel, kind, body))
            return "report", {}
        elif job.mode == "baseline":
            from harness.workers.baseline import run_baseline

            report = run_baseline(job)
        elif job.mode == "compile":
            from harness.workers.baseline import run_compile

            report = run_compile(job)
        else:
            from harness.workers.candidate import run_build, run_evaluate, run_time

            def builder(spec: BuildSpec, key: str) -> Built:
                return _build_by_parent(channel, spec, key)

            if job.mode == "build":
                report = run_build(job, job_dir, builder)
            elif job.mode == "time":
                report = run_time(job, job_dir, builder, lambda: _await_go(channel))
            else:
                ready = lambda body: _outputs_ready(channel, body)  # noqa: E731
                report = run_evaluate(job, job_dir, ready, builder)
    except UserError as err:
        return "user_error", UserErrorReport(
            what=err.what, where=err.where, fix=err.fix
        ).model_dump()
    except Exception as err:
        if not raised_by_kernelpilot(err, _user_files(job, job_dir)):
            raise  # the candidate's or the module's: the worker dies with its traceback
        traceback.print_exc()  # kept in the worker's log, which the parent reads
        return "harness_error", HarnessErrorReport(
            what=f"{KERNELPILOT_BUG}: {type(err).__name__}: {err}"
        ).model_dump()
    report.device_name = device_name(job.problem.device)
    report.torch_version = torch.__version__
    report.network_isolated = network_isolated()
    return "report", report.model_dump(mode="json")


def _user_files(job: WorkerJob, job_dir: Path) -> list[Path]:
    """The files whose frames are not kernelpilot's wherever they lie: the candidate's, the
    module's and its input factory's."""
    problem = job.problem
    return [
        job_dir / "candidate.py",
        problem.source_path,
        problem.inputs_path or problem.source_path,
    ]


def main(job_dir: Path, channel_fd: int) -> None:
    channel = os.fdopen(channel_fd, "w")  # opened before any candidate code is imported
    job_file = job_dir / "job.json"
    job = WorkerJob.model_validate_json(job_file.read_text())
    job_file.unlink()
    _start_from_compiled_baseline()
    kind, body = run(job, job_dir, channel)
    send(channel, kind, body)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if kind == "report" else 3)


def _start_from_compiled_baseline() -> None:
    """Where the parent shows this worker its target's compiled baseline (read-only: the
    compile worker's Inductor cache, ``harness.judge.baseline.seed_compiled_baseline``), a
    private copy of it becomes this worker's Inductor cache: its ``torch.compile`` of the
    reference finds it compiled, and whatever it writes stays its own."""
    seed = os.environ.pop(INDUCTOR_SEED, "")
    if not seed or not os.path.isdir(seed):
        return
    private = os.path.join(tempfile.mkdtemp(prefix="inductor-"), "cache")
    shutil.copytree(seed, private, symlinks=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = private
    # Its kernels are compiled already: no pool of compile processes. On a machine with Triton
    # a first torch.compile starts one of them per core, each importing torch, whether there
    # is anything to compile or not (torch._inductor.async_compile.maybe_warm_pool).
    from torch._inductor import config as inductor

    inductor.compile_threads = 1


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
