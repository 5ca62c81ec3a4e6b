"""The evaluator: ``evaluate(problem, candidate) -> EvalResult``.

Static gate in this process; reference cases from the reference worker; build, checks and
timing in a fresh candidate worker per candidate; output comparison back here, where candidate
code never runs; acceptance by the pure rule in ``harness.judge.accept``.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from harness.builds.cache import default_cache_dir
from harness.builds.requests import ParentBuilder
from harness.candidate_workers import CandidateWorkers
from harness.config import EvalConfig
from harness.errors import HarnessError, UserError
from harness.files import read_user_text
from harness.gpus import GpuPool, chosen_gpus, environment
from harness.judge.accept import measure_until_judged
from harness.judge.baseline import CompiledBaselines
from harness.judge.comparators import Comparators, set_up
from harness.judge.precision import comparer as comparer_for
from harness.judge.receive import CaseReceiver, Receiver
from harness.judge.verdict import checked_result, timed_result
from harness.problem.load import problem_from_target
from harness.problem.reference import ReferenceData, draw_seeds, reference_data
from harness.records import AuditReport, Candidate, Check, EvalResult, Problem, Status
from harness.sandbox import lifetime
from harness.sandbox.jobs import CandidateReport
from harness.static.python import check_python


class WeakSpecError(UserError):
    """The problem's inputs cannot tell a kernel that works from a null answer."""

    def __init__(self, audit: AuditReport, where: str) -> None:
        self.audit = audit
        details = "; ".join(finding.detail for finding in audit.findings)
        fixes = "; ".join(sorted({finding.fix for finding in audit.findings}))
        super().__init__(f"weak problem spec, refusing to verify on it: {details}", where, fixes)


class Evaluator:
    """Evaluates candidates for problems; keeps each problem's reference cases for reuse.

    On cuda, ``evaluate`` may be called from several threads at once: each call checks and
    times its candidate on a GPU of its own (``harness.gpus``), waiting for one to be free."""

    def __init__(
        self,
        config: EvalConfig | None = None,
        seed: int | None = None,
        work_dir: Path | None = None,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config or EvalConfig()
        self.seed = seed
        # Its own scratch folder unless given one: the cases' files (GBs for large problems)
        # go with the evaluator, or with the run whatever ends it (harness.sandbox.lifetime).
        self.work_dir = Path(work_dir or lifetime.scratch("evaluator-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        if work_dir is None:
            weakref.finalize(self, shutil.rmtree, self.work_dir, ignore_errors=True)
        self.cache_dir = self.config.cache_dir or default_cache_dir()
        self.progress = progress or (lambda message: None)
        self.builder = ParentBuilder(
            self.cache_dir / "kernels",
            self.config.sandbox,
            self.config.build_timeout_s,
            int(self.config.cache_max_gb * 2**30),
            self.progress,
            self.config.precompiled_headers,
        )
        # It must exist before the first worker starts: a sandbox shows only what exists then,
        # and builds land in it while candidates' workers run.
        self.builder.store.root.mkdir(parents=True, exist_ok=True)
        self._references: dict[str, ReferenceData] = {}
        # Where reference outputs are made again per candidate (on cuda): each problem's
        # comparator worker on each GPU, kept for its candidates.
        self.comparators = Comparators(self.config, self.work_dir, self.cache_dir)
        # Each problem's torch.compile baseline, compiled once for its timing workers.
        self.compiled_baselines = CompiledBaselines(self.config, self.work_dir, self.progress)
        self.workers = CandidateWorkers(
            self.config, self.cache_dir, self.work_dir, self.builder, self.compiled_baselines
        )
        # What threads evaluating at once share. The references are made under ``_lock``, once
        # (every candidate waits for its problem's); a comparator or a compiled baseline under
        # a lock of its own, so that one GPU's does not hold up the others. The GPUs (on cuda)
        # are lent one evaluation at a time. A lease is never asked for while a lock is held.
        self._lock = threading.RLock()
        self._pool: GpuPool | None = None
        # A problem whose reference failed (a weak spec, an error in the user's code): every
        # candidate asking again gets the same error, not another run of the reference.
        self._failed: dict[str, UserError | HarnessError] = {}
        # Per candidate (by content): the gate's reasons and the build's outcome, each found
        # once. A failed build is never built again; a built one is in the build cache.
        self._gate: dict[str, list[str]] = {}
        self._builds: dict[str, CandidateReport] = {}

    @property
    def deadline(self) -> float | None:
        """No candidate's worker runs past it (``time.monotonic()``): a search's wall budget.
        Reaching it raises ``OutOfTime``: the candidate's result is unknown, not a failure."""
        return self.workers.deadline

    @deadline.setter
    def deadline(self, at: float | None) -> None:
        self.workers.deadline = at

    def gpus(self) -> GpuPool:
        """The GPUs cuda candidates are checked and timed on (``eval.gpus``), chosen when
        first asked for."""
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = GpuPool(chosen_gpus(self.config.gpus))
        return self._pool

    def parallel(self, problem: Problem) -> int:
        """How many of ``problem``'s candidates can be checked and timed at once."""
        return len(self.gpus()) if problem.device == "cuda" else 1

    @contextmanager
    def _device(self, problem: Problem) -> Iterator[str | None]:
        """A GPU of the pool for one candidate's checks and timing (None on cpu)."""
        if problem.device != "cuda":
            yield None
            return
        with self.gpus().lease() as gpu:
            yield gpu

    def reference(self, problem: Problem) -> ReferenceData:
        """Reference cases and audit; raises WeakSpecError on a spec a null answer passes.
        Where the comparator makes reference outputs again per candidate, it starts beside the
        reference worker, on the first GPU, and is up when this returns."""
        key = problem.model_dump_json()
        with self._lock:
            if key in self._failed:
                raise self._failed[key]
            try:
                return self._reference(problem, key)
            except (UserError, HarnessError) as err:
                self._failed[key] = err
                raise

    def _reference(self, problem: Problem, key: str) -> ReferenceData:
        if key not in self._references:
            self.progress(f"{problem.name}: computing reference outputs and auditing the spec")
            seeds = draw_seeds(self.config, self.seed)
            recompute = self.config.recomputes(problem.device)
            first = self.gpus().gpus[0] if problem.device == "cuda" else None
            comparator = self.comparators.start(problem, seeds, first) if recompute else None
            try:
                data = reference_data(problem, self.config, work_dir=self.work_dir, seeds=seeds,
                                      extra_env=environment(first))  # fmt: skip
                audit = data.report.audit
                if audit.weak and not data.report.strengthened:
                    raise WeakSpecError(audit, f"{problem.source_path}:{problem.class_name}")
                if comparator is not None:
                    set_up(comparator, data)
            except BaseException:
                if comparator is not None:
                    comparator.close()
                raise
            self._references[key] = data
            if comparator is not None:
                self.comparators.keep(key, first, comparator)
        return self._references[key]

    def release(self, problem: Problem) -> None:
        """Done with ``problem``: stop its comparators (which hold the reference's parameters
        on the devices) and drop its reference data; asking again starts afresh. Not while a
        thread still evaluates one of its candidates."""
        key = problem.model_dump_json()
        self.comparators.release(key)
        with self._lock:
            data = self._references.pop(key, None)
            self._failed.pop(key, None)
        for handle in data.files.values() if data else []:
            handle.close()

    def close(self) -> None:
        """Stop the comparator workers (also done when the evaluator is collected); not while
        a thread still evaluates."""
        self.comparators.close()

    def prebuild(self, problem: Problem, candidates: list[Candidate]) -> None:
        """Build candidates' kernels in parallel worker processes, filling the build cache."""
        jobs = self.config.build_jobs or max(1, len(_cpus()))
        self.progress(f"{problem.name}: building {len(candidates)} candidate(s), {jobs} at a time")
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            reports = list(pool.map(lambda c: self.build(problem, c), candidates))
        failed = [r.status.value for r in reports if r.status is not None]
        built = len(reports) - len(failed)
        self.progress(f"{problem.name}: {built} built, {len(failed)} failed {failed or ''}")

    def build(self, problem: Problem, candidate: Candidate) -> CandidateReport:
        """Build one candidate's kernels in a worker (status None when they built); a
        candidate is gated and built once, whoever asks again gets the same record."""
        key = candidate_key(problem, candidate)
        reasons = self.gate(problem, candidate)
        if reasons:
            return CandidateReport(status=Status.rejected, reason="; ".join(reasons))
        if key not in self._builds:
            self._builds[key] = self.workers.run(problem, candidate, "build", None)
        return self._builds[key]

    def gate(self, problem: Problem, candidate: Candidate) -> list[str]:
        """The static gate's reasons to reject a candidate (empty: it passes), found once."""
        key = candidate_key(problem, candidate)
        if key not in self._gate:
            self._gate[key] = check_python(candidate.source, problem.class_name, problem.dtype)
        return self._gate[key]

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        reasons = self.gate(problem, candidate)
        if reasons:
            return EvalResult(
                status=Status.rejected,
                reason="; ".join(reasons),
                device=problem.device,
                checks=[Check(name="static_gate", passed=False, detail="; ".join(reasons))],
            )
        built = self._builds.get(candidate_key(problem, candidate))
        if built is not None and built.status is not None:  # its build failed: not again
            return EvalResult(
                status=built.status,
                reason=built.reason,
                log=built.log,
                checks=built.checks,
                device=problem.device,
                device_name=built.device_name,
                torch_version=built.torch_version,
            )
        data = self.reference(problem)
        with self._device(problem) as gpu:
            on = f" on GPU {gpu}" if gpu is not None and len(self.gpus()) > 1 else ""
            self.progress(f"{problem.name}: building, checking and timing a candidate{on}")
            prestarted = self.workers.prestart(problem, candidate, data, gpu)
            try:
                checked, reference_ops, kernels = self._check(problem, candidate, data, gpu)
                if checked.status is not Status.ok:
                    return checked
                self.progress(f"{problem.name}: checks passed; timing{on}")
                return measure_until_judged(
                    lambda: timed_result(
                        checked,
                        self.workers.time(problem, candidate, data, reference_ops, gpu, prestarted),
                        self.config,
                        kernels,
                    ),
                    self.config.busy_retries,
                    lambda why: self.progress(
                        f"{problem.name}: {why}; timing again in a fresh worker"
                    ),
                )
            finally:
                if prestarted is not None:
                    prestarted.discard()

    def _check(
        self, problem: Problem, candidate: Candidate, data: ReferenceData, gpu: str | None
    ) -> tuple[EvalResult, list[str], Callable[[], list[str]]]:
        """The checks' worker and the trusted comparison of its outputs: the verdict so far,
        the reference's ops as that worker profiled them, and the reference's CUDA kernels
        (asked for only if the candidate launched any)."""
        receiver: Receiver
        if data.recomputed:
            comparator = self.comparators.on(problem, data, gpu)
            receiver, kernels = comparator.begin(), comparator.reference_kernels
        else:
            comparer = comparer_for(
                problem, len(data.cases), data.report.bitwise_deterministic, data.report.precision
            )
            receiver, kernels = CaseReceiver(data, comparer), data.report.cuda_kernels.copy
        report = self.workers.run(problem, candidate, "evaluate", data, receiver, gpu=gpu)
        checked = checked_result(problem, self.config, data, report, receiver.result())
        return checked, report.reference_ops, kernels


def candidate_key(problem: Problem, candidate: Candidate) -> str:
    """What a candidate's gate verdict and build depend on: its source, the problem's class
    name, dtype and device."""
    text = "\0".join([problem.class_name, problem.dtype, problem.device, candidate.source])
    return hashlib.sha256(text.encode()).hexdigest()


def _cpus() -> list[int]:
    return list(os.sched_getaffinity(0))


def evaluate_paths(
    problem_path: Path,
    candidate_path: Path,
    device: str,
    config: EvalConfig | None = None,
    dtype: str = "float32",
    seed: int | None = None,
) -> EvalResult:
    """Evaluate a hand-written candidate file against a problem file."""
    problem = problem_from_target(str(problem_path), device, dtype)
    candidate = Candidate(source=read_user_text(candidate_path, "candidate file"), origin="user")
    return Evaluator(config, seed=seed).evaluate(problem, candidate)
