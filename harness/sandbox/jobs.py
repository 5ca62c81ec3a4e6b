"""Records exchanged between the trusted parent and its worker processes (as JSON files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from harness.config import EvalConfig
from harness.judge.precision import ReferencePrecision
from harness.records import AuditReport, Check, Problem, Status, Timings, TimingStats
from harness.timings import WindowLoad


def reference_file(case: int) -> str:
    """The reference worker's file of one case's reference outputs (for the parent only)."""
    return f"reference-{case}.pt"


def outputs_file(case: int) -> str:
    """A candidate worker's file of its outputs for one case (read and removed by the parent)."""
    return f"outputs-{case}.pt"


class CaseSpec(BaseModel):
    """One verification case, as every worker can make it again from its seed.

    Cases travel as specs, never as tensors: each worker draws a case's inputs and parameters
    when it runs the case and drops them after, so memory holds one case at a time and no
    GBs of inputs are written to disk. ``input_digest`` (of the reference worker's draw) makes
    sure a candidate worker ran the very same inputs.
    """

    name: str
    kind: Literal["seed", "repeat", "variant", "captured", "wide", "strided"]
    seed: int = Field(description="Seed of the inputs (of the first case's, for derived kinds).")
    params_seed: int | None = Field(
        default=None, description="Seed the parameters are perturbed with; None: initial ones."
    )
    variant: int = Field(
        default=0,
        description="Which shape variant (kind 'variant'), or which other captured call "
        "(kind 'captured': an index into Problem.captured_calls).",
    )
    reference_case: int = Field(description="Index of the case whose reference outputs apply.")
    async_stream: bool = Field(
        default=False,
        description="On cuda: run under a busy non-default current stream, inputs copied in "
        "asynchronously just before the call.",
    )
    input_digest: str = ""
    output_meta: list[tuple[list[int], str]] = Field(default_factory=list)
    output_form: str = Field(
        default="T",
        description="The reference's result with its tensors as T (harness.workers.calls): "
        "a candidate's must be the same.",
    )


class WorkerJob(BaseModel):
    mode: Literal["reference", "build", "evaluate", "time", "baseline", "compare", "compile"]
    problem: Problem
    config: EvalConfig
    cache_dir: Path
    seeds: list[int] = Field(default_factory=list)
    strengthened: bool = False
    candidate_source: str | None = None
    cases: list[CaseSpec] = Field(default_factory=list)
    reference_deterministic: bool = False
    reference_ops: list[str] = Field(
        default_factory=list,
        description="The reference's top-level aten ops: the checks' worker profiles them "
        "itself, before it loads the candidate; the timing worker gets them from it.",
    )
    params_digest: str = Field(
        default="", description="The reference worker's parameters (cases.params_digest)."
    )
    precision: ReferencePrecision | None = Field(
        default=None, description="The reference's own precision, which the tolerance follows."
    )
    recompute: bool = Field(
        default=False,
        description="Reference outputs are made again by a comparator worker next to each "
        "candidate's (the reference worker stores none; see harness.judge.comparator).",
    )
    await_go: bool = Field(
        default=False,
        description="A timing worker started while the candidate's checks run "
        "(harness.prestart): it makes the reference ready, says so (a ``ready`` message), then "
        "waits for the parent's go (a ``Go`` line on its stdin) before it loads the candidate.",
    )
    compile_before_go: bool = Field(
        default=False,
        description="Such a worker also makes its compiled baseline before its go: on cpu, or "
        "loaded from the target's compiled baseline. A first compile on cuda comes after the "
        "go: Inductor picks kernel configurations by timing them, which the checks would "
        "disturb.",
    )


class Go(BaseModel):
    """The parent's go to a prestarted timing worker: the checks passed, and what they found
    that the timing needs."""

    reference_ops: list[str] = Field(
        description="The reference's top-level aten ops, as the checks' worker profiled them."
    )


class ReferenceReport(BaseModel):
    """What the reference worker found: the audit, the cases it wrote, the ops the reference runs."""

    audit: AuditReport
    strengthened: bool
    cases: list[CaseSpec] = Field(default_factory=list)
    bitwise_deterministic: bool = Field(
        default=False, description="Two runs of the reference on the same inputs agree bit for bit."
    )
    params_digest: str = Field(
        default="", description="The reference's parameters, for the other workers to check."
    )
    phase_seconds: dict[str, float] = Field(
        default_factory=dict, description="Where the reference worker's time went, by phase."
    )
    peak_device_bytes: int | None = Field(
        default=None, description="Peak device memory the reference worker allocated (cuda)."
    )
    device_total_bytes: int | None = Field(
        default=None, description="The memory of the GPU the reference worker ran on (cuda)."
    )
    io_bytes: int = Field(default=0, description="Bytes of the first case's inputs and outputs.")
    input_summary: str = Field(
        default="", description="The first case's inputs: dtype and shape of each."
    )
    copy_bandwidth_gbs: float | None = Field(
        default=None, description="The device's measured copy bandwidth (a large copy), GB/s."
    )
    matmul_tflops: float | None = Field(
        default=None, description="The device's measured matmul rate in the problem's dtype."
    )
    cuda_kernels: list[str] = Field(
        default_factory=list,
        description="The reference's CUDA kernels (cuda, outputs stored; else the comparator's).",
    )
    precision: ReferencePrecision | None = Field(
        default=None,
        description="The reference's own distance from strict float32 where reduced-precision "
        "settings (TF32) were on and changed its outputs (harness.judge.precision).",
    )
    precision_skipped: str = Field(
        default="",
        description="Why that distance could not be measured (the tolerance stayed the dtype's).",
    )
    network_isolated: bool = False
    device_name: str = ""
    torch_version: str = ""


class CandidateReport(BaseModel):
    """What a build or evaluate worker found; ``status`` is None while every check passed."""

    status: Status | None = None
    reason: str = ""
    log: str = ""
    checks: list[Check] = Field(default_factory=list)
    timings: Timings = Field(
        default_factory=Timings, description="What the timing worker measured (the result's own)."
    )
    reference_ops: list[str] = Field(
        default_factory=list,
        description="The reference's top-level aten ops, as the checks' worker profiled them.",
    )
    flops: int = Field(
        default=0, description="Matmul/conv FLOPs of one reference forward (torch's counter)."
    )
    cuda_kernels: list[str] = Field(
        default_factory=list,
        description="The CUDA kernels the candidate's last (profiled) call launched: the parent "
        "checks that one is its own, not a kernel the reference launches too.",
    )
    network_isolated: bool | None = Field(
        default=None,
        description="Whether the worker had no network; None: it did not get as far as to say.",
    )
    device_name: str = ""
    torch_version: str = ""
    phase_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Wall time in the worker: reference_profile, build, check (the checks' "
        "worker); eager_alone, load, timing, profile (the timing worker).",
    )
    time_breakdown: list[tuple[str, float]] = Field(
        default_factory=list,
        description="One profiled call: (kernel or operator, microseconds), largest first.",
    )
    baseline_breakdowns: dict[str, list[tuple[str, float]]] = Field(
        default_factory=dict,
        description="The same for one call of each baseline (eager, torch.compile), after timing.",
    )
    device_us: dict[str, float] = Field(
        default_factory=dict,
        description="cuda: the device time of those profiled calls, their kernels summed "
        "(microseconds), for the candidate and each baseline.",
    )


class CompileReport(BaseModel):
    """What a compile worker did: ``torch.compile`` of the reference, compiled by one call on
    timing-like inputs into the target's Inductor cache, which its candidates' timing workers
    start from (``harness.judge.baseline.seed_compiled_baseline``)."""

    error: str = Field(default="", description="Why it could not be compiled; empty: compiled.")
    network_isolated: bool = False
    device_name: str = ""
    torch_version: str = ""
    phase_seconds: dict[str, float] = Field(default_factory=dict)


class BaselineReport(BaseModel):
    """What a baseline worker measured: eager and ``torch.compile`` of the reference, no candidate.

    The nightly job times a configured target that has no shipped kernel with it.
    """

    eager: TimingStats
    compiled: TimingStats | None = None
    compile_baseline_error: str | None = None
    window: WindowLoad | None = Field(default=None, description="The machine while it was timed.")
    unjudged: str = Field(
        default="",
        description="Set by the parent (harness.judge.baseline), never by the worker: why the "
        "times are not judged (the machine too busy every time it was timed); empty: judged.",
    )
    network_isolated: bool = False
    device_name: str = ""
    torch_version: str = ""
    input_summary: str = Field(
        default="", description="The forward's inputs, dtype and shape each: float32[8, 1024]."
    )
    phase_seconds: dict[str, float] = Field(
        default_factory=dict, description="Wall time in the worker: setup, compile, timing."
    )


class CheckFailed(Exception):
    """Raised inside a worker by a failed check: ends the candidate's evaluation with a status."""

    def __init__(self, status: Status, check: str, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.status, self.check, self.reason, self.log = status, check, reason, log


RESULT_KINDS = ("report", "user_error", "harness_error")


class WorkerMessage(BaseModel):
    """One line a worker sends on its channel (newline-delimited JSON): its kind and body.

    The final ones (``RESULT_KINDS``) end the worker's work: its report, the user's error it
    met, or kernelpilot's own failure; the others ask the parent something on the way
    ("outputs": a case's outputs are ready; "build": build this kernel) or answer it (the
    comparator's). A worker may run untrusted code, so the body is read into its own record
    by whoever expects it, never trusted as it comes."""

    kind: str
    body: Any = None

    @property
    def final(self) -> bool:
        return self.kind in RESULT_KINDS


class UserErrorReport(BaseModel):
    """A problem with the user's reference or inputs, found inside a worker."""

    what: str
    where: str = ""
    fix: str = ""


class HarnessErrorReport(BaseModel):
    """kernelpilot's own code raised inside a worker (``harness.sandbox.blame``); the traceback is in
    the worker's log."""

    what: str
