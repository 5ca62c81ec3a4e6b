"""Reference worker: runs only the user's module, never candidate code.

It plans the verification cases (fresh inputs per seed, perturbed parameters, other shapes,
a repeat of the first case), computes the reference outputs, audits the spec, and profiles the
reference's ops. Cases are made, run and dropped one at a time: device memory holds one case
(and the previous case's outputs, for the audit), never all of them. Each case's reference
outputs go to a file of their own, for the parent only, unless a comparator worker makes them
again beside each candidate (``job.recompute``, the default on cuda: nothing leaves the
device); candidate workers get the case specs and draw the inputs again from their seeds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from harness.devices import copy_bandwidth_gbs, matmul_tflops
from harness.errors import UserError
from harness.judge.precision import (
    ReferencePrecision,
    held_to,
    measure,
    reduced_settings,
    strict_float32,
)
from harness.judge.tolerance import Tolerance
from harness.problem.audit import NullAnswerAudit, nondeterminism_finding
from harness.problem.cases import (
    build_reference,
    case_inputs,
    case_module,
    input_digest,
    params_digest,
)
from harness.problem.plan import extra_specs, renumber, repeat_spec, seed_specs
from harness.problem.variants import wide_scale
from harness.records import AuditFinding, AuditReport
from harness.sandbox.jobs import CaseSpec, ReferenceReport, WorkerJob, reference_file
from harness.sandbox.memory import is_out_of_memory
from harness.workers.calls import bound
from harness.workers.profiling import OpProfile, profile_forward
from harness.workers.reference_forward import (
    as_outputs,
    check_dtypes,
    check_not_empty,
    check_unchanged,
    copies,
    describe_inputs,
    finite,
    nonfinite_error,
    on_host,
    out_of_memory,
    tensor_bytes,
)

# The first case run again: a finding if the two runs differ beyond tolerance, whether they
# agree bit for bit, and the reference's profile where that run was profiled.
Determinism = tuple[AuditFinding | None, bool, OpProfile | None]


class Phases:
    """Seconds spent per phase of the reference run (device work waited for at each end)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            if self.device == "cuda":
                torch.cuda.synchronize()
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started


class ReferenceRun:
    """One reference worker's job: the cases, one at a time, and the audit."""

    def __init__(self, job: WorkerJob, job_dir: Path) -> None:
        self.job, self.job_dir, self.problem = job, job_dir, job.problem
        self.tol: Tolerance = held_to(self.problem, None)
        self.precision: ReferencePrecision | None = None
        self.precision_skipped = ""  # why it could not be measured, where it could not
        self.forward_name = f"{self.problem.class_name}.forward"
        self.where = f"{self.problem.source_path}:{self.forward_name}"
        self.inputs_where = (
            f"{self.problem.inputs_path or self.problem.source_path}: "
            f"{self.problem.inputs_fn or 'inputs'}()"
        )
        self.phase = Phases(self.problem.device)
        self.on_cuda = self.problem.device == "cuda"
        self.io_bytes = 0
        self.input_summary = ""
        with self.phase("construct"):
            self.base = build_reference(self.problem, job.seeds[0])

    def run_seed_cases(
        self, strengthened: bool, determinism: bool = False
    ) -> tuple[list[CaseSpec], NullAnswerAudit, str, Determinism | None]:
        """The seed cases, audited as they go; the third item names a non-finite case, if any.
        With ``determinism``, the first case is run again right after it (``determinism``), so
        no case's outputs outlive its turn but what the audit still compares with."""
        audit = NullAnswerAudit(self.tol)
        specs = seed_specs(self.job.seeds, self.on_cuda)
        determined = None
        for spec in specs:
            # The reference's precision, measured on each pass's first case: the strengthened
            # inputs, where taken, are the cases candidates meet (TF32's error depends on signs).
            outputs = self.run_case(spec, strengthened, audit, precision_case=spec is specs[0])
            if outputs is None:
                return specs, audit, spec.name, determined
            if determinism and determined is None:
                determined = self.determinism(spec, strengthened, outputs)
            del outputs
        return specs, audit, "", determined

    def run_case(
        self,
        spec: CaseSpec,
        strengthened: bool,
        audit: NullAnswerAudit | None = None,
        precision_case: bool = False,
    ) -> list[torch.Tensor] | None:
        """Draw, run and store one case; None (and nothing stored) when its output is not
        finite. Fills in the spec's digest and output shapes; with ``precision_case``, the
        reference's precision and the tolerance (``measure_precision``)."""
        with self.phase("inputs"):
            try:
                inputs = case_inputs(self.problem, spec, strengthened)
            except torch.OutOfMemoryError as err:
                raise out_of_memory(self.problem, [], spec.name, err) from err
        if inputs is None:
            return None
        shapes = [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor)]
        if spec.kind == "variant":
            spec.name = f"other shapes {shapes}"
        elif spec.kind == "captured":
            spec.name = f"captured call {spec.variant + 2} {shapes}"
        elif spec.kind == "wide":
            spec.name = f"inputs scaled x{wide_scale(spec.seed):.1f}"
        spec.input_digest = input_digest(inputs)  # as drawn: what every worker draws again
        module = case_module(self.base, spec)
        random_state = _random_state(self.on_cuda) if precision_case else None
        outputs = self.checked_forward(module, inputs, spec)
        if not finite(outputs):
            return None
        if random_state is not None:
            self.measure_precision(module, inputs, outputs, random_state)
            if audit is not None:
                audit.tol = self.tol
        if audit is not None:
            with self.phase("audit"):
                audit.add(inputs, outputs)
        if spec.kind == "seed" and spec.reference_case == 0:
            self.io_bytes = sum(tensor_bytes(x) for x in [*inputs, *outputs])
            self.input_summary = describe_inputs(inputs)
        spec.output_meta = [
            (list(out.shape), str(out.dtype).removeprefix("torch.")) for out in outputs
        ]
        if not self.job.recompute:  # else: the comparator makes them again, on the device
            with self.phase("store"):
                cpu = [on_host(out.detach()) for out in outputs]
                torch.save(cpu, self.job_dir / reference_file(spec.reference_case))
        return outputs

    def checked_forward(
        self, module: torch.nn.Module, inputs: list, spec: CaseSpec
    ) -> list[torch.Tensor]:
        """The case's outputs. On a seed case, where the inputs and outputs are as the user's
        code gives them, what the harness cannot verify is refused first: dtypes it does not
        handle, a forward that changes its inputs in place, empty outputs."""
        seed = spec.kind == "seed"
        if seed:
            check_dtypes(inputs, "the forward's input", self.inputs_where, "return these dtypes")
        before = copies(inputs) if seed else []
        with self.phase("forward"):
            outputs, spec.output_form = as_outputs(
                self.forward(module, inputs, spec.name), self.where
            )
        if seed:
            check_unchanged(inputs, before, self.forward_name, self.where)
            check_dtypes(outputs, "the forward's output", self.where, "return these dtypes")
            check_not_empty(inputs, outputs, self.where, self.inputs_where)
        return outputs

    def measure_precision(
        self,
        module: torch.nn.Module,
        inputs: list,
        outputs: list[torch.Tensor],
        random_state: list[torch.Tensor],
    ) -> None:
        """On the first case of a float32 problem under reduced-precision settings (cuDNN's
        TF32 by default): the case again with every float32 setting strict, from the random
        state the first run started from (a forward that draws numbers draws the same), and
        the tolerance widened to the reference's own distance from it
        (harness.judge.precision). Where that run cannot be made (no room for a second set of
        outputs, a forward that refuses strict settings), the tolerance stays the dtype's: a
        candidate is then held tighter, never looser."""
        self.precision, self.precision_skipped = None, ""
        self.tol = held_to(self.problem, None)
        device = self.problem.device
        settings = reduced_settings(device) if self.problem.dtype == "float32" else []
        if not settings:
            return
        devices = [torch.cuda.current_device()] if self.on_cuda else []
        try:
            with (
                self.phase("precision"),
                torch.random.fork_rng(devices=devices),
                strict_float32(device),
                torch.no_grad(),
            ):
                _set_random_state(random_state, self.on_cuda)
                result = bound(module, self.problem.input_keywords)(*inputs)
                strict, _ = as_outputs(result, self.where)
                self.precision = measure(outputs, strict, settings)
                del result, strict
        except Exception as err:  # the tolerance stays the dtype's; the report says why
            self.precision_skipped = f"{type(err).__name__}: {err}"[:300]
            return
        self.tol = held_to(self.problem, self.precision)

    def forward(self, module: torch.nn.Module, inputs: list, case: str):
        with torch.no_grad():
            try:
                return bound(module, self.problem.input_keywords)(*inputs)
            except Exception as err:  # the user's forward: any failure is theirs to fix
                if is_out_of_memory(err):
                    raise out_of_memory(self.problem, inputs, case, err) from err
                raise UserError(
                    f"the reference forward raised {type(err).__name__}: {err}",
                    where=self.where,
                    fix="make the module run on the inputs its input factory returns",
                ) from err

    def determinism(
        self, spec: CaseSpec, strengthened: bool, first: list[torch.Tensor]
    ) -> Determinism:
        """Run the first case again: a finding if the two runs differ beyond tolerance, and
        whether they agree bit for bit (then a candidate must too: see the 'repeat' case).
        Where the parent compares with stored outputs on cuda, this run is also profiled for
        the reference's CUDA kernels (else the comparator profiles them, later: CUPTI and the
        profiler's imports cost seconds); its ops, for the candidates' checks, each candidate
        worker profiles itself before it loads the candidate."""
        with self.phase("determinism"):
            inputs = case_inputs(self.problem, spec, strengthened)
            assert inputs is not None
            if input_digest(inputs) != spec.input_digest:
                raise UserError(
                    "the input factory gave other inputs for the same seed on a second call: "
                    "every worker draws a case's inputs again from its seed",
                    where=f"{self.problem.inputs_path or self.problem.source_path}",
                    fix="draw every random value with torch (torch.randn, torch.rand, ...): "
                    "not with Python's random or numpy's, which torch.manual_seed does not seed",
                )
            # Another random state than the first run's (which followed the seeded draw of
            # its inputs): a forward that draws random numbers (dropout left on) shows.
            torch.manual_seed(spec.seed ^ 0x5EED)
            again: list = []

            def forward(*xs) -> None:
                again.extend(as_outputs(self.forward(self.base, list(xs), spec.name), "")[0])

            ops = None
            if self.on_cuda and not self.job.recompute:
                ops = profile_forward(forward, inputs, self.problem.device)
            else:
                forward(*inputs)
            bitwise = all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
            # Both runs under the same settings: reduced precision explains no difference.
            plain = held_to(self.problem, None)
            finding = None if bitwise else nondeterminism_finding(first, again, plain)
        return finding, bitwise, ops

    def run_extra(self, spec: CaseSpec, strengthened: bool) -> bool:
        """An extra case; False where the module refuses its inputs or its outputs are not
        finite (not a case the module is meant for)."""
        try:
            outputs = self.run_case(spec, strengthened)
        except UserError:
            return False
        return outputs is not None


def run_reference(job: WorkerJob, job_dir: Path) -> ReferenceReport:
    run = ReferenceRun(job, job_dir)
    if job.problem.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    specs, audit, nonfinite, determined = run.run_seed_cases(job.strengthened, determinism=True)
    if nonfinite:
        raise nonfinite_error(job, nonfinite)
    findings = audit.findings()
    assert determined is not None  # every case finite: the first was run twice
    nondeterministic, bitwise, ops = determined
    if nondeterministic:
        findings.append(nondeterministic)
    report = AuditReport(problem=job.problem.name, weak=bool(findings), findings=findings)
    strengthened = job.strengthened
    if findings and not nondeterministic and not job.strengthened:
        # Signed, rescaled inputs may leave the module's domain (log, sqrt): no help then.
        stronger, stronger_audit, stronger_nonfinite, _ = run.run_seed_cases(True)
        report.strengthened_ok = not stronger_nonfinite and not stronger_audit.findings()
        if report.strengthened_ok:
            specs, strengthened = stronger, True
    if report.weak and not report.strengthened_ok:  # refused: no case of it is ever run
        return _report(run, report, strengthened, [], bitwise, ops)
    repeat = repeat_spec(specs[0], run.on_cuda)
    extra = extra_specs(job.seeds, job.config, run.on_cuda, len(job.problem.captured_calls))
    kept = [spec for spec in extra if run.run_extra(spec, strengthened)]
    # The repeat comes second: same inputs and parameters as the first case, so a failure
    # there (and not in the first) is the stream order or memory never written.
    cases = [specs[0], repeat, *specs[1:], *kept]
    renumber(kept, len(specs), job_dir if not job.recompute else None)
    return _report(run, report, strengthened, cases, bitwise, ops)


def _report(
    run: ReferenceRun,
    audit: AuditReport,
    strengthened: bool,
    cases: list[CaseSpec],
    bitwise: bool,
    ops: OpProfile | None,
) -> ReferenceReport:
    device = run.problem.device
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else None  # the cases' own
    total = torch.cuda.get_device_properties(0).total_memory if device == "cuda" else None
    with run.phase("ceilings"):  # what a memory- or compute-bound kernel is measured against
        try:
            bandwidth = copy_bandwidth_gbs(device, run.io_bytes) if run.io_bytes else None
        except torch.OutOfMemoryError:  # no room beside the module for a copy of its bytes
            bandwidth = None  # no share of it in the feedback
        tflops = matmul_tflops(device, run.problem.dtype)
    return ReferenceReport(
        audit=audit,
        strengthened=strengthened,
        cases=cases,
        bitwise_deterministic=bitwise,
        params_digest=params_digest(run.base),
        cuda_kernels=ops.cuda_kernels if ops else [],
        phase_seconds=run.phase.seconds,
        peak_device_bytes=peak,
        device_total_bytes=total,
        io_bytes=run.io_bytes,
        input_summary=run.input_summary,
        copy_bandwidth_gbs=bandwidth,
        matmul_tflops=tflops,
        precision=run.precision,
        precision_skipped=run.precision_skipped,
    )


def _random_state(on_cuda: bool) -> list[torch.Tensor]:
    """The CPU's random state, and the current GPU's on cuda."""
    state = [torch.random.get_rng_state()]
    if on_cuda:
        state.append(torch.cuda.get_rng_state())
    return state


def _set_random_state(state: list[torch.Tensor], on_cuda: bool) -> None:
    torch.random.set_rng_state(state[0])
    if on_cuda:
        torch.cuda.set_rng_state(state[1])
