"""A candidate's workers as the evaluator starts them: the job each is given, what its
sandbox shows and its environment adds, how its report is read; and its timing worker,
started while its checks run (``harness.prestart``)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from harness.builds.requests import ParentBuilder
from harness.config import EvalConfig
from harness.gpus import environment
from harness.judge.baseline import CompiledBaselines
from harness.judge.receive import Receiver
from harness.judge.verdict import candidate_report
from harness.prestart import Launch, PrestartedTiming, fits_beside
from harness.problem.reference import ReferenceData
from harness.records import Candidate, Problem
from harness.sandbox.bubblewrap import WorkerView, problem_view
from harness.sandbox.environment import INDUCTOR_SEED
from harness.sandbox.jobs import CandidateReport, Go, WorkerJob
from harness.sandbox.lifetime import OutOfTime
from harness.sandbox.run import WorkerOutcome, run_worker
from harness.workers import stream_hold


class CandidateWorkers:
    """Starts and runs candidates' workers for one evaluator. ``deadline``: no worker runs past
    it (``time.monotonic()``; a search's wall budget): reaching it raises ``OutOfTime``."""

    def __init__(
        self,
        config: EvalConfig,
        cache_dir: Path,
        work_dir: Path,
        builder: ParentBuilder,
        compiled_baselines: CompiledBaselines,
    ) -> None:
        self.config, self.cache_dir, self.work_dir = config, cache_dir, work_dir
        self.builder, self.compiled_baselines = builder, compiled_baselines
        self.deadline: float | None = None

    def prestart(
        self, problem: Problem, candidate: Candidate, data: ReferenceData, gpu: str | None
    ) -> PrestartedTiming | None:
        """The candidate's timing worker, started now to get ready beside its checks
        (``harness.prestart``); None where it is not to be (``eval.prestart_timing``, memory).
        The target's compiled baseline, where it is due, is compiled first, before the checks
        start (``launch``)."""
        if not self.config.prestart_timing or not fits_beside(problem.device, data.report):
            return None
        launch = self.launch(problem, candidate, "time", data, gpu, await_go=True)
        return PrestartedTiming(launch, self.config.sandbox)

    def time(
        self,
        problem: Problem,
        candidate: Candidate,
        data: ReferenceData,
        reference_ops: list[str],
        gpu: str | None,
        prestarted: PrestartedTiming | None,
    ) -> CandidateReport:
        """One timing of a candidate whose checks passed: in its prestarted worker the first
        time, in a fresh worker after that (a verdict measured again) or where the prestarted
        one ended before it was ready."""
        if prestarted is not None and not prestarted.taken:
            outcome = prestarted.go(
                Go(reference_ops=reference_ops),
                self.config.run_timeout_s,
                self.on_build(problem),
                self.deadline,
            )
            if outcome is not None:
                return self.report(problem, outcome)
        return self.run(problem, candidate, "time", data, reference_ops=reference_ops, gpu=gpu)

    def run(
        self,
        problem: Problem,
        candidate: Candidate,
        mode: Literal["build", "evaluate", "time"],
        data: ReferenceData | None,
        receiver: Receiver | None = None,
        reference_ops: list[str] | None = None,
        gpu: str | None = None,
    ) -> CandidateReport:
        """Run one of a candidate's workers (``mode``) to its end; ``receiver`` takes the
        checks' outputs as they are ready."""
        launch = self.launch(problem, candidate, mode, data, gpu, reference_ops)
        outcome = run_worker(
            launch.job_dir, self.config.run_timeout_s, launch.memory_limit_gb, launch.view,
            self.config.sandbox, receiver.at(launch.job_dir) if receiver else None,
            launch.extra_env, on_build=self.on_build(problem), deadline=self.deadline,
            pausable=mode == "build",  # it imports and runs candidate code: not beside timing
        )  # fmt: skip
        return self.report(problem, outcome)

    def launch(
        self,
        problem: Problem,
        candidate: Candidate,
        mode: Literal["build", "evaluate", "time"],
        data: ReferenceData | None,
        gpu: str | None,
        reference_ops: list[str] | None = None,
        await_go: bool = False,
    ) -> Launch:
        """A candidate's worker ready to start: its job written, its sandbox and environment.
        A timing worker's compiled baseline, where it is due (``CompiledBaselines``), is
        compiled now."""
        config = self.config
        view = candidate_view(problem, self.cache_dir)
        compiled = self.compiled_baselines.next_worker(problem, gpu) if mode == "time" else {}
        if compiled:  # its own copy of the compiled baseline (read-only here)
            view.read_only.append(Path(compiled[INDUCTOR_SEED]))
        job = WorkerJob(
            mode=mode,
            problem=problem,
            config=config,
            cache_dir=self.cache_dir,
            candidate_source=candidate.source,
            seeds=data.seeds if data else [0],
            cases=data.cases if data else [],
            strengthened=data.report.strengthened if data else False,
            params_digest=data.report.params_digest if data else "",
            precision=data.report.precision if data else None,
            recompute=data.recomputed if data else False,
            reference_ops=reference_ops or [],
            await_go=await_go,
            # before its go, a compile that times nothing (harness.prestart)
            compile_before_go=await_go and (problem.device == "cpu" or bool(compiled)),
        )
        job_dir = Path(tempfile.mkdtemp(prefix=f"{mode}-", dir=self.work_dir))
        (job_dir / "job.json").write_text(job.model_dump_json())
        memory = config.memory_limit_gb if problem.device == "cpu" else None
        # The checks' worker on cuda holds other streams' work back (harness.workers.stream_hold).
        gated = mode == "evaluate" and problem.device == "cuda" and config.stream_gate
        extra_env = environment(gpu) | compiled
        if gated:
            extra_env |= stream_hold.worker_environment(self.cache_dir)
        return Launch(job_dir, memory, view, extra_env)

    def on_build(self, problem: Problem) -> Callable[[object], dict]:
        """How a candidate's worker's build requests are answered: built by the parent."""
        return lambda body: self.builder.answer(body, problem.device, problem.dtype)

    def report(self, problem: Problem, outcome: WorkerOutcome) -> CandidateReport:
        """A candidate worker's report, or why there is none. The worker's own limit
        (``eval.run_timeout_s``) does not count the parent's builds for it; the caller's
        deadline raises ``OutOfTime``: its result is unknown, not a failure."""
        if outcome.deadline_reached:
            raise OutOfTime(f"{problem.name}: the time budget ran out while a candidate ran")
        return candidate_report(outcome, problem, self.config.run_timeout_s)


def candidate_view(problem: Problem, cache_dir: Path) -> WorkerView:
    """What a candidate's worker sees besides its job folder: the checkout and the build cache,
    both read-only (its builds are asked of the parent: ``harness.builds.requests``)."""
    return problem_view(problem, cache_dir)
