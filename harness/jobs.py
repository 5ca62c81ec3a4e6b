"""Records exchanged between the trusted parent and its worker processes (as JSON files)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness.config import EvalConfig
from harness.records import AuditReport, Check, Problem, Status, TimingStats

# The reference worker's two files: cases without outputs (for candidate workers) and the
# reference outputs (for the parent only).
INPUTS_FILE = "inputs.pt"
OUTPUTS_FILE = "reference.pt"


class WorkerJob(BaseModel):
    mode: Literal["reference", "build", "evaluate"]
    problem: Problem
    config: EvalConfig
    cache_dir: Path
    seeds: list[int] = Field(default_factory=list)
    strengthened: bool = False
    candidate_source: str | None = None
    reference_ops: list[str] = Field(default_factory=list)
    reference_kernels: list[str] = Field(default_factory=list)


class ReferenceReport(BaseModel):
    """What the reference worker found: the audit, the cases it wrote, the ops the reference runs."""

    audit: AuditReport
    strengthened: bool
    case_names: list[str] = Field(default_factory=list)
    aten_ops: list[str] = Field(default_factory=list)
    cuda_kernels: list[str] = Field(default_factory=list)
    network_isolated: bool = False
    device_name: str = ""
    torch_version: str = ""


class CandidateReport(BaseModel):
    """What a build or evaluate worker found; ``status`` is None while every check passed."""

    status: Status | None = None
    reason: str = ""
    log: str = ""
    checks: list[Check] = Field(default_factory=list)
    eager: TimingStats | None = None
    compiled: TimingStats | None = None
    candidate: TimingStats | None = None
    eager_alone: TimingStats | None = Field(
        default=None,
        description="Eager timed in the same worker before any candidate code was loaded.",
    )
    compile_baseline_error: str | None = None
    network_isolated: bool = False
    device_name: str = ""
    torch_version: str = ""


class CheckFailed(Exception):
    """Raised inside a worker by a failed check: ends the candidate's evaluation with a status."""

    def __init__(self, status: Status, check: str, reason: str, log: str = "") -> None:
        super().__init__(reason)
        self.status, self.check, self.reason, self.log = status, check, reason, log


class UserErrorReport(BaseModel):
    """A problem with the user's reference or inputs, found inside a worker."""

    what: str
    where: str = ""
    fix: str = ""
