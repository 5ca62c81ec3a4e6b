"""The parent's side of a capture: the worker started in the sandbox over the repository, its
report read as untrusted data, and each captured class made into a Problem.

The constructor's arguments of a config-object class stay in the file the worker saved; the
parent copies it beside the run's other scratch files and never loads it (only workers do,
``harness.problem.user_code``). A captured call's tensors are drawn fresh per seed from their
specs (``harness.problem.cases``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from pydantic import ValidationError

from harness.capture.examples import Example
from harness.capture.records import CapturedTarget, CaptureReport
from harness.capture.worker import CaptureJob, python_argv
from harness.config import EvalConfig
from harness.errors import UserError
from harness.records import Problem
from harness.sandbox import lifetime
from harness.sandbox.bubblewrap import WorkerView
from harness.sandbox.run import run_worker

CAPTURE_ENTRY = "harness.capture.worker"
# A saved constructor call larger than this is not copied. Modules passed whole are common
# (MAE(encoder=ViT(...)) saves the encoder with its weights: hundreds of MB); workers load it.
SAVED_LIMIT_BYTES = 2**30


def check_command(command: str, where: str) -> None:
    """A capture command is a Python one: the hooks live in the process that runs it."""
    try:
        argv = python_argv(command)
    except ValueError as err:
        raise UserError(f"capture command cannot be read: {err}", where=where, fix=FIX) from None
    if argv is None:
        raise UserError(
            f"capture command {command!r} is not a Python command", where=where, fix=FIX
        )


FIX = (
    "write it as 'python script.py ARGS' or 'python -m module ARGS' (run from the repository root)"
)


def capture(
    root: Path,
    classes: list[tuple[str, str]],
    config: EvalConfig,
    tests: list[str] | None = None,
    command: str | None = None,
    examples: list[Example] | None = None,
    limit_s: float = 300.0,
    gpu: bool = False,
    guess: bool = False,
) -> tuple[CaptureReport, Path]:
    """Run the tests and the Markdown examples (or the command) over ``root`` with hooks on
    ``classes`` ((path, class) pairs, paths relative to ``root``); what was seen, and the
    folder its saved files are in.
    ``gpu``: the worker sees the GPU (a run on cuda: the repository's code may need one).
    ``guess``: then the classes nothing called are built and called from guesses."""
    job_dir = lifetime.scratch("capture-")
    saved = lifetime.scratch("captured-")
    job = CaptureJob(
        root=root, classes=classes, tests=tests or [], examples=examples or [],
        command=command, guess=guess, limit_s=limit_s,
    )  # fmt: skip
    (job_dir / "job.json").write_text(job.model_dump_json())
    view = WorkerView(read_only=[root], writable=[], gpu=gpu)
    # A worker with the GPU gets no address-space limit: a CUDA context alone reserves more
    # virtual memory than any such limit allows (as the evaluator's cuda workers).
    memory = None if gpu else config.memory_limit_gb
    outcome = run_worker(job_dir, limit_s + 30.0, memory, view, config.sandbox, entry=CAPTURE_ENTRY)
    results = [message for message in outcome.results() if message.kind == "report"]
    source = job.source() or "guessing how to build and call them"
    if not results:
        how = "ran past its time limit" if outcome.timed_out else "ended without a report"
        raise UserError(
            f"capturing how the changed modules are called: {source} {how}:\n"
            f"{outcome.log_tail[-2000:]}",
            where=str(root),
            fix="make the tests, examples or capture command run in the repository on their own",
        )
    try:
        report = CaptureReport.model_validate(results[0].body)
    except ValidationError as err:
        raise UserError(
            f"the capture worker's report is malformed: {err.errors()[0]['msg']}",
            where=str(root),
            fix="this is a kernelpilot bug if the repository's code did not write it",
        ) from None
    for target in report.targets:
        if target.init_file is not None:
            _keep(job_dir, saved, target)
    shutil.rmtree(job_dir, ignore_errors=True)
    return report, saved


def _keep(job_dir: Path, saved: Path, target: CapturedTarget) -> None:
    """Copy the worker's saved constructor call (a plain file, bounded) into ``saved``."""
    name = target.init_file or ""
    found = job_dir / name
    if "/" in name or not found.is_file() or found.is_symlink():
        target.init_file, target.problem = None, "its saved constructor arguments are missing"
        return
    if found.stat().st_size > SAVED_LIMIT_BYTES:
        limit = f"{SAVED_LIMIT_BYTES // 2**20} MiB"
        target.init_file, target.problem = None, f"its constructor's arguments are over {limit}"
        return
    shutil.copyfile(found, saved / name)


def captured_problem(
    target: CapturedTarget, root: Path, saved: Path, device: str, dtype: str
) -> Problem:
    """A Problem from a captured class: its largest call's inputs (timed and checked), its
    other calls of the same form (checked too), its captured constructor."""
    path = (root / target.path).resolve()
    call = target.calls[0]
    others = [
        [*other.args, *other.keywords.values()]
        for other in target.calls[1:]
        if len(other.args) == len(call.args) and list(other.keywords) == list(call.keywords)
    ]
    return Problem(
        name=target.class_name,
        source_path=path,
        class_name=target.class_name,
        inputs_fn=None,
        captured_inputs=[*call.args, *call.keywords.values()],
        input_keywords=list(call.keywords),
        captured_calls=others,
        init_fn=None,
        init_capture=saved / target.init_file if target.init_file else None,
        init_args=target.init_args or [],
        init_kwargs=target.init_kwargs or {},
        search_paths=[root, path.parent],
        device=device,
        dtype=dtype,
    )
