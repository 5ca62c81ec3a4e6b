"""Records that cross package and process boundaries.

Every one is a pydantic model: the CLI, the agents and the worker processes exchange these,
never loose dicts or tuples.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.capture.records import ArgSpec

# The timing records live in harness.timings; callers import them from here too.
from harness.timings import Disturbance as Disturbance
from harness.timings import Slowdown as Slowdown
from harness.timings import Timings, Verdict
from harness.timings import TimingStats as TimingStats


class Status(str, Enum):
    """The verdict on one candidate. Everything but ``ok``, ``harness_error`` and ``unjudged``
    is a failure of the candidate; ``harness_error``: kernelpilot's own code failed (a bug of
    ours), so the candidate is neither right nor wrong; ``unjudged``: its checks passed but the
    machine was too busy, every time it was timed, for its timing to be judged
    (``harness.judge.busy``): neither faster nor rejected."""

    build_error = "build_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    incorrect = "incorrect"
    rejected = "rejected"
    harness_error = "harness_error"
    unjudged = "unjudged"
    ok = "ok"


class Problem(BaseModel):
    """A reference module and the way to build it and its inputs, on one device and dtype."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Short name used in reports (file stem or class name).")
    source_path: Path = Field(description="Python file that defines the reference class.")
    class_name: str = Field(default="Model", description="The reference nn.Module class.")
    inputs_path: Path | None = Field(
        default=None, description="File defining the input factory; None means source_path."
    )
    inputs_fn: str | None = Field(
        default="get_inputs", description="Function returning the forward inputs (a list)."
    )
    input_shapes: list[list[int]] | None = Field(
        default=None, description="Shapes of random signed float inputs, used when no inputs_fn."
    )
    captured_inputs: list[ArgSpec] | None = Field(
        default=None,
        description="A captured forward call's arguments (harness.capture): tensors drawn "
        "fresh per seed like the ones seen, plain values as they were.",
    )
    input_keywords: list[str] = Field(
        default_factory=list,
        description="The forward's keyword arguments: the inputs' last values go by these names.",
    )
    captured_calls: list[list[ArgSpec]] = Field(
        default_factory=list,
        description="The other captured calls' arguments (other shapes and values the "
        "repository runs the module with, as captured_inputs): each is a checked case.",
        max_length=8,
    )
    init_fn: str | None = Field(
        default="get_init_inputs", description="Function returning constructor args, if any."
    )
    init_path: Path | None = Field(
        default=None, description="File defining init_fn; None means source_path."
    )
    init_capture: Path | None = Field(
        default=None,
        description="The constructor's arguments as a capture saved them (config objects): "
        "loaded inside workers only.",
    )
    init_args: list = Field(default_factory=list, description="Constructor args from config.")
    init_kwargs: dict = Field(default_factory=dict, description="Constructor kwargs from config.")
    search_paths: list[Path] = Field(
        default_factory=list, description="Folders put on sys.path to import the reference."
    )
    device: str = Field(default="cpu", description="'cpu' or 'cuda'.")
    dtype: str = Field(default="float32", description="float32, float16 or bfloat16.")
    atol: float | None = Field(default=None, description="Override of the dtype's tolerance.")
    rtol: float | None = Field(default=None, description="Override of the dtype's tolerance.")


class Candidate(BaseModel):
    """A Python module source that defines ``ModelNew``, a drop-in replacement of the reference."""

    model_config = ConfigDict(frozen=True)

    source: str
    origin: str = Field(default="user", description="Who wrote it: 'offline', 'user', a role.")
    note: str = Field(default="", description="What the author says the candidate does.")
    id: str = Field(
        default="",
        description="Its node in the search tree; empty off the tree (a user's or a shipped file).",
    )
    parent: str | None = Field(default=None, description="The tree node it grew from, if any.")


class Check(BaseModel):
    """One verification check and its outcome, shown in the report."""

    name: str
    passed: bool
    detail: str = ""


# EvalResult's timing fields before they moved into ``Timings`` (saved trajectories hold them).
_FLAT_TIMINGS = {
    "candidate": "candidate",
    "eager": "eager_beside",
    "eager_alone": "eager_alone",
    "eager_after": "eager_after",
    "compiled": "compiled_beside",
    "compiled_alone": "compiled_alone",
    "compile_baseline_error": "compile_baseline_error",
}


class EvalResult(BaseModel):
    """Everything measured about one candidate on one problem."""

    status: Status
    reason: str = Field(default="", description="One line: why it failed, empty when ok.")
    log: str = Field(default="", description="Compiler or runtime output, truncated.")
    checks: list[Check] = Field(default_factory=list)
    device: str = "cpu"
    device_name: str = ""
    torch_version: str = ""
    max_abs_error: float | None = None
    rel_error: float | None = None
    timings: Timings = Field(default_factory=Timings)
    vs_eager: Verdict | None = None
    vs_compile: Verdict | None = None
    input_mode: str = Field(
        default="as_given", description="'as_given', or 'strengthened' when the audit had to."
    )
    seeds: list[int] = Field(
        default_factory=list, description="The correctness seeds it was judged on."
    )
    io_bytes: int = Field(default=0, description="Bytes of one call's inputs and outputs.")
    input_summary: str = Field(
        default="", description="The forward's inputs, dtype and shape each: float32[8, 1024]."
    )
    time_breakdown: list[tuple[str, float]] = Field(
        default_factory=list,
        description="One profiled call: (kernel on cuda, operator on cpu; microseconds).",
    )
    baseline_breakdowns: dict[str, list[tuple[str, float]]] = Field(
        default_factory=dict,
        description="The same for one call of each baseline: eager, torch.compile (what a plan "
        "is up against).",
    )
    device_us: dict[str, float] = Field(
        default_factory=dict,
        description="cuda: the device time of one profiled call, its kernels summed "
        "(microseconds), by who ran it: kernelpilot, eager, torch.compile. The verdicts are "
        "judged on call time (timings), not on these.",
    )
    phase_seconds: dict[str, float] = Field(
        default_factory=dict,
        description="Where its evaluation's wall time went: build, check, timing, ...",
    )
    copy_bandwidth_gbs: float | None = Field(
        default=None, description="The device's measured copy bandwidth, GB/s (a ceiling)."
    )
    flops: int = Field(default=0, description="Matmul/conv FLOPs of one call of the reference.")
    matmul_tflops: float | None = Field(
        default=None, description="The device's measured matmul rate, TFLOP/s (a ceiling)."
    )

    @model_validator(mode="before")
    @classmethod
    def _flat_timings(cls, data: Any) -> Any:
        """A result saved with its times as flat fields (an older trajectory): into ``timings``."""
        if isinstance(data, dict) and "timings" not in data:
            flat = {new: data[old] for old, new in _FLAT_TIMINGS.items() if old in data}
            rest = {key: value for key, value in data.items() if key not in _FLAT_TIMINGS}
            data = {**rest, "timings": flat}
        return data

    @property
    def speedup_vs_eager(self) -> float | None:
        return self.vs_eager.speedup if self.vs_eager else None

    @property
    def speedup_vs_compile(self) -> float | None:
        return self.vs_compile.speedup if self.vs_compile else None


class AuditFinding(BaseModel):
    """A weakness of a problem's input spec, with how to fix it."""

    kind: str = Field(description="'null_answer', 'nondeterministic' or 'inputs'.")
    detail: str
    fix: str


class AuditReport(BaseModel):
    """Whether a problem's inputs can tell an honest kernel from a null answer."""

    problem: str
    weak: bool
    findings: list[AuditFinding] = Field(default_factory=list)
    strengthened_ok: bool | None = Field(
        default=None,
        description="When weak as given: whether signed, rescaled inputs of the same shapes fix it.",
    )
