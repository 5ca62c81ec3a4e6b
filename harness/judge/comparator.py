"""Parent side of the comparator worker (``harness.workers.compare``): one per problem, started
beside the reference worker, kept for the problem's candidates.

With ``eval.reference_outputs`` recomputed (the default on cuda), the reference worker stores
no outputs; each case a candidate worker announces is passed on to the comparator, which makes
the reference's outputs of that case again on the device and compares them there with the
candidate's (handed over through CUDA IPC). The parent keeps the order of the cases and the
verdict: a comparator that stops answering fails the candidate, never passes it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from harness.config import EvalConfig
from harness.errors import UserError
from harness.judge.receive import next_case
from harness.judge.tolerance import CaseComparer, CaseComparison
from harness.records import Problem
from harness.sandbox.bubblewrap import problem_view
from harness.sandbox.jobs import ReferenceReport, UserErrorReport, WorkerJob
from harness.sandbox.redact import scrub
from harness.sandbox.run import read_tail, start_worker, stop_worker


class ComparatorStopped(Exception):
    """The comparator worker ended or stopped answering."""


class Comparator:
    def __init__(
        self,
        problem: Problem,
        config: EvalConfig,
        seeds: list[int],
        work_dir: Path,
        cache_dir: Path,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        """``extra_env``: the worker's environment's additions (the GPU it may use)."""
        self.problem, self.timeout = problem, config.run_timeout_s
        job = WorkerJob(
            mode="compare",
            problem=problem,
            config=config,
            cache_dir=cache_dir,
            seeds=seeds,
            recompute=True,
        )
        self.job_dir = Path(tempfile.mkdtemp(prefix="compare-", dir=work_dir))
        (self.job_dir / "job.json").write_text(job.model_dump_json())
        self.started = time.monotonic()
        # The reference is the user's own code: no limits beyond the machine's, as its worker.
        # It reads candidates' outputs from their job folders (harness.workers.handover), in work_dir.
        view = problem_view(problem, cache_dir, writable=[work_dir])
        self.process, self.reader = start_worker(
            self.job_dir, None, view, config.sandbox, extra_env
        )
        self.read = 0  # messages taken so far
        self.kernels: list[str] | None = None
        self.report: ReferenceReport | None = None

    def setup(self, report: ReferenceReport) -> None:
        """The cases the reference worker planned; waits until the comparator is up."""
        self.report = report
        self.ask(
            {
                "setup": {
                    "cases": [spec.model_dump() for spec in report.cases],
                    "strengthened": report.strengthened,
                    "deterministic": report.bitwise_deterministic,
                    "params_digest": report.params_digest,
                    "precision": report.precision.model_dump() if report.precision else None,
                }
            }
        )
        self.answer("ready")

    def reference_kernels(self) -> list[str]:
        """The CUDA kernels a reference forward launches (profiled once, on first request: it
        starts CUPTI, which takes seconds and is then paid by no one else)."""
        if self.kernels is None:
            self.ask({"kernels": True})
            self.kernels = list(self.answer("kernels")["kernels"])
        return self.kernels

    def alive(self) -> bool:
        return self.process.poll() is None

    def begin(self) -> RemoteReceiver:
        """A new candidate's comparisons (``at`` names its worker's folder)."""
        self.ask({"begin": True})
        assert self.report is not None
        return RemoteReceiver(self)

    def close(self) -> str:
        """Stop the worker; its log's end (for a failure's reason)."""
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
        return stop_worker(self.process, self.reader, self.started, self.job_dir).log_tail

    def ask(self, request: dict) -> None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(request).encode() + b"\n")
            self.process.stdin.flush()
        except (BrokenPipeError, ValueError) as err:
            raise ComparatorStopped("the comparator worker is gone") from err

    def answer(self, kind: str) -> dict:
        """The next message of ``kind`` from the worker; its user error is raised as ours,
        any other message or none in time is ComparatorStopped."""
        deadline = time.monotonic() + self.timeout
        while True:
            if len(self.reader.messages) > self.read:
                message = self.reader.messages[self.read]
                self.read += 1
                body = message.body or {}
                if message.kind == kind:
                    return body
                if message.kind == "user_error":  # the user's module, as in any worker
                    raise UserError(**UserErrorReport.model_validate(body).model_dump())
                raise ComparatorStopped(
                    f"the comparator answered {message.kind}: "
                    f"{body.get('what', body) if isinstance(body, dict) else body}"
                )
            if self.reader.closed or time.monotonic() > deadline:
                how = "ended" if self.reader.closed else f"gave no answer in {self.timeout:.0f} s"
                log = scrub(read_tail(self.job_dir / "worker.log", 1500)).strip()
                raise ComparatorStopped(
                    f"the comparator worker {how}" + (f"; its log ends:\n{log}" if log else "")
                )
            self.reader.poll(0.02)


class RemoteReceiver:
    """One candidate's cases, passed on to the comparator as the candidate worker announces
    them; the parent checks their order."""

    def __init__(self, comparator: Comparator) -> None:
        assert comparator.report is not None
        self.comparator, self.job_dir = comparator, Path()
        self.cases = comparator.report.cases
        self.order = CaseComparer(comparator.problem, len(self.cases))  # counts, never compares
        self.stopped: str | None = None

    def at(self, job_dir: Path) -> RemoteReceiver:
        """This receiver, for the worker in ``job_dir`` (its outputs files, on cpu)."""
        self.job_dir = job_dir
        return self

    def __call__(self, body: object) -> bool:
        spec = next_case(self.order, self.cases, body)
        if spec is None or self.stopped:
            return False
        number = self.order.compared
        try:
            self.comparator.ask({"case": number, "body": body, "dir": str(self.job_dir)})
            verdict = self.comparator.answer("verdict")
        except (ComparatorStopped, UserError) as err:
            self.stopped = f"{spec.name}: {err}"
            return False
        self.order.compared += 1
        return verdict.get("case") == number and verdict.get("go") is True

    def result(self) -> CaseComparison | None:
        """The comparison (None when no case was announced). A case announced out of order
        fails it as in the parent; a comparator that stopped fails it as ``stopped`` (the
        candidate is not shown to be wrong, and not right either)."""
        if self.order.failed is not None:
            return self.order.result()
        failed = self.stopped
        if failed is None:
            try:
                self.comparator.ask({"end": True})
                comparison = CaseComparison.model_validate(self.comparator.answer("comparison"))
            except ComparatorStopped as err:
                failed = f"the comparison did not finish: {err}"
            else:
                return comparison if comparison.compared or comparison.failed else None
        self.order.failed, self.order.check = failed, "compared"
        comparison = self.order.result()
        comparison.stopped = True
        return comparison
