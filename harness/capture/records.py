"""What a capture found, as records: they cross from the sandboxed worker (untrusted: the pull
request's code ran there) to the parent, which reads them as data, bounded, never as code."""

from __future__ import annotations

import math
from typing import Annotated, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

PlainValue = None | bool | int | float | str
MAX_CALLS = 4  # the largest distinct call shapes kept per class
MAX_DIMS = 8
GUESSED = "kernelpilot's guess (nothing in the repository builds it)"
IMPORT_LINE = r"^from [A-Za-z_][A-Za-z0-9_.]* import [A-Za-z_][A-Za-z0-9_]*$"


class Drawing(NamedTuple):
    """How fresh values like a captured tensor's are drawn, the one rule that both the cases
    (``harness.problem.cases.drawn_like``) and the frozen factories (``freeze.tensor_source``)
    follow: ``bool`` coin flips; ``int`` uniform integers in [a, b); ``normal`` standard normal
    times a plus b; ``uniform`` uniform [0, 1) times a plus b."""

    kind: Literal["bool", "int", "normal", "uniform"]
    a: float
    b: float


class TensorSpec(BaseModel):
    """A tensor argument as seen: enough to draw fresh ones like it, never its values."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shape: list[Annotated[int, Field(ge=0)]] = Field(max_length=MAX_DIMS)
    dtype: str = Field(max_length=32, pattern=r"^[a-z][a-z0-9]*$")
    low: float = Field(allow_inf_nan=False, description="Its smallest finite value (0: none).")
    high: float = Field(allow_inf_nan=False, description="Its largest finite value.")
    mean: float = Field(default=0.0, allow_inf_nan=False)
    std: float = Field(default=1.0, allow_inf_nan=False)

    @field_validator("dtype")
    @classmethod
    def _a_torch_dtype(cls, name: str) -> str:
        """Written into generated code as ``torch.<dtype>``: a dtype torch has, nothing else."""
        import torch

        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise ValueError(f"{name!r} is not a torch dtype")
        return name

    def drawing(self) -> Drawing:
        """Signed values where the seen ones were signed (their mean and spread), within their
        range where they were not: a module fed only positives may take a log."""
        import torch

        if self.dtype == "bool":
            return Drawing("bool", 0, 0)
        if not getattr(torch, self.dtype).is_floating_point:
            return Drawing("int", int(self.low), int(self.high) + 1)
        if self.low < 0:
            return Drawing("normal", max(self.std, 1e-3), self.mean)
        return Drawing("uniform", self.high - self.low, self.low)

    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count


class ArgSpec(BaseModel):
    """One forward argument: a tensor (drawn fresh per seed) or a plain value (passed as is)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tensor: TensorSpec | None = None
    value: PlainValue = Field(default=None, description="The plain value, where not a tensor.")

    @field_validator("value")
    @classmethod
    def _finite(cls, value: PlainValue) -> PlainValue:
        """Written into generated code by its repr: a float must read back (no nan, inf)."""
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        if isinstance(value, str) and len(value) > 200:
            raise ValueError("a string argument over 200 characters")
        return value

    def describe(self) -> str:
        if self.tensor is None:
            return repr(self.value)[:40]
        return f"{self.tensor.dtype}[{', '.join(str(size) for size in self.tensor.shape)}]"


class CallSpec(BaseModel):
    """One forward call: positional arguments, then keyword ones by name."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    args: list[ArgSpec] = Field(max_length=64)
    keywords: dict[str, ArgSpec] = Field(default_factory=dict, max_length=64)

    def size(self) -> int:
        values = [*self.args, *self.keywords.values()]
        return sum(arg.tensor.numel() for arg in values if arg.tensor is not None)

    def describe(self) -> str:
        parts = [arg.describe() for arg in self.args]
        parts += [f"{name}={arg.describe()}" for name, arg in self.keywords.items()]
        return ", ".join(parts)


class CapturedTarget(BaseModel):
    """How one class was built and called while the repository's code ran."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="The class's file, relative to the repository root.")
    class_name: str
    source: str = Field(
        description="What ran: 'tests/test_model.py, README.md' or the command.", max_length=500
    )
    built_at: str = Field(
        default="",
        description="Where it was constructed: 'tests/test_model.py:12'.",
        max_length=500,
    )
    init_args: list[PlainValue] | None = Field(
        default=None, description="Plain constructor arguments; None: see init_file."
    )
    init_kwargs: dict[str, PlainValue] | None = None
    init_file: str | None = Field(
        default=None,
        description="The constructor's arguments saved by the worker (config objects), a file "
        "name in the capture's folder: loaded only inside workers, never by the parent.",
    )
    init_expression: str | None = Field(
        default=None,
        description="The constructor's arguments as a Python expression (a list, or a dict of "
        "keyword ones), where they could be written out: for kernelpilot targets --write.",
        max_length=4000,
    )
    init_imports: list[Annotated[str, Field(pattern=IMPORT_LINE, max_length=300)]] = Field(
        default_factory=list, max_length=32
    )
    calls: list[CallSpec] = Field(default_factory=list, max_length=MAX_CALLS)
    guessed: bool = Field(
        default=False,
        description="Built and called by kernelpilot's guess (harness.capture.guess), not by "
        "the repository's code: its sizes are small and made up.",
    )
    problem: str = Field(default="", description="Why it cannot be a target, if it cannot.")


class CaptureReport(BaseModel):
    """What one capture run found: per requested class, its record (or why none)."""

    model_config = ConfigDict(extra="forbid")

    ran: Literal["tests", "examples", "tests and examples", "command", "guesses"]
    source: str = Field(max_length=500)
    targets: list[CapturedTarget] = Field(default_factory=list, max_length=256)
    outcome: str = Field(default="", description="How the tests or command ended.", max_length=2000)
