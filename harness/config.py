"""The harness's configuration (how candidates are verified and timed, the targets) and the
reading of pyproject.toml files; the whole ``[tool.kernelpilot]`` table is ``bot.settings``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.errors import UserError
from harness.files import read_user_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


class EvalConfig(BaseModel):
    """How candidates are verified and timed."""

    model_config = ConfigDict(extra="forbid")

    seeds: int = Field(default=5, ge=5, description="Correctness seeds, fresh inputs each.")
    shape_variants: int = Field(
        default=2,
        ge=0,
        description=(
            "Extra input shapes (a random smaller batch, the last dim grown by a random odd "
            "amount) where the module allows."
        ),
    )
    wide_range: bool = Field(
        default=True,
        description=(
            "Also check on float inputs scaled 4-16x (drawn from the seed): kernels whose "
            "approximations hold only over randn's range fail there."
        ),
    )
    strided_inputs: bool = Field(
        default=True,
        description=(
            "Also check on the first case's inputs in other memory layouts (column-major, "
            "every other element): kernels that assume contiguous inputs fail there."
        ),
    )
    warmup: int = Field(
        default=3, ge=1, description="Untimed calls before timing each implementation."
    )
    min_reps: int = Field(default=10, ge=3, description="Fewest timed calls per implementation.")
    max_reps: int = Field(default=200, ge=3, description="Most timed calls per implementation.")
    time_budget_s: float = Field(
        default=1.5, gt=0, description="Timing stops after this many seconds per implementation."
    )
    compile_baseline: bool = Field(default=True, description="Also time torch.compile(reference).")
    noise_floor: float = Field(
        default=0.05, ge=0, description="Smallest speedup margin that counts."
    )
    review_speedup: float = Field(
        default=10.0, gt=1, description="Speedups above this need review."
    )
    busy_retries: int = Field(
        default=2,
        ge=0,
        description="Times a candidate is timed again, in a fresh worker, when the machine was "
        "too busy to judge its timing (over a quarter of some implementation's timed calls "
        "preempted by other processes); after that it is reported as not judged.",
    )
    build_timeout_s: float = Field(
        default=600, gt=0, description="Limit for one candidate's build."
    )
    run_timeout_s: float = Field(
        default=300, gt=0, description="Limit for verifying and timing one."
    )
    memory_limit_gb: float = Field(
        default=16, gt=0, description="Address-space limit of a cpu worker (cuda: not applied)."
    )
    prestart_timing: bool = Field(
        default=True,
        description="Start a candidate's timing worker while its checks run: Python, torch, "
        "the reference and its compiled baseline are ready when the checks pass, and a "
        "candidate costs seconds less. On cuda only where the reference used at most a sixth "
        "of the GPU's memory (two workers hold it meanwhile).",
    )
    build_jobs: int = Field(
        default=0, ge=0, description="Parallel builds; 0 means one per CPU core."
    )
    gpus: int = Field(
        default=0,
        ge=0,
        description="cuda: GPUs to check and time candidates on, one candidate at a time on "
        "each (a search's step of several candidates spreads over them); 0: every visible GPU.",
    )
    precompiled_headers: bool = Field(
        default=True,
        description="Precompile torch's headers once (after the first build of a device) for "
        "the builds after it: a CPU candidate's C++ then builds 1.4-2.8x faster, and so does a "
        "CUDA candidate's C++ file (the whole build where its .cu file has no torch headers).",
    )
    cache_dir: Path | None = Field(
        default=None, description="Build cache; default $KERNELPILOT_CACHE or ~/.cache/kernelpilot."
    )
    cache_max_gb: float = Field(
        default=20, gt=0, description="Size of the built kernels kept; least recently used go."
    )
    stream_gate: bool = Field(
        default=True,
        description=(
            "cuda: on every other busy-stream case, hold back work a candidate queues on "
            "streams other than the caller's until the harness has read the outputs "
            "(harness/workers/native/stream_gate.c, preloaded into the checks' worker), so that work the "
            "caller's stream does not wait for is caught every time, not only when it is still "
            "running. false: those cases race the work, as the free ones do."
        ),
    )
    sandbox: Literal["bubblewrap", "off"] = Field(
        default="bubblewrap",
        description=(
            "How workers that run the module's or a candidate's code are isolated "
            "(harness.sandbox.bubblewrap): bubblewrap, or off for trusted code only. Not settable in "
            "pyproject.toml, which a pull request can change: --sandbox or KERNELPILOT_SANDBOX."
        ),
    )
    reference_outputs: Literal["auto", "stored", "recomputed"] = Field(
        default="auto",
        description=(
            "stored: the reference worker keeps every case's outputs on the host for the "
            "comparisons; recomputed: a comparator worker runs the reference again next to each "
            "candidate and compares on the device (no outputs leave it); auto: recomputed on "
            "cuda, stored on cpu (where running the reference again costs more than storing)."
        ),
    )

    def recomputes(self, device: str) -> bool:
        """Whether reference outputs are made again per candidate (see reference_outputs)."""
        if self.reference_outputs == "auto":
            return device == "cuda"
        return self.reference_outputs == "recomputed"


class TargetConfig(BaseModel):
    """One module to optimize, as named in ``[[tool.kernelpilot.targets]]``."""

    model_config = ConfigDict(extra="forbid")

    module: str = Field(description="'path/to/file.py:ClassName', relative to pyproject.toml.")
    inputs: str | list[list[int]] | None = Field(
        default=None,
        description="'path.py:function' returning the forward inputs, or a list of input shapes. "
        "Default: a get_inputs() beside the class.",
    )
    keywords: list[str] = Field(
        default_factory=list,
        description="Names of the forward's keyword arguments: the last values the input "
        "factory returns are passed by these names.",
    )
    init: str | None = Field(
        default=None,
        description="'path.py:function' returning the constructor's arguments (a list, or a "
        "dict of keyword arguments): for config objects, which TOML cannot write.",
    )
    init_args: list = Field(default_factory=list, description="Positional constructor arguments.")
    init_kwargs: dict = Field(default_factory=dict, description="Keyword constructor arguments.")
    dtype: str | None = Field(
        default=None, description="Overrides the run's dtype for this target."
    )
    atol: float | None = Field(default=None, description="Absolute tolerance override.")
    rtol: float | None = Field(default=None, description="Relative tolerance override.")


class CaptureConfig(BaseModel):
    """``[tool.kernelpilot.capture]``: how a changed module with no configured target is found
    being built and called (``harness.capture``)."""

    model_config = ConfigDict(extra="forbid")

    command: str | None = Field(
        default=None,
        description="A Python command to run instead of the tests that import the module, "
        "e.g. 'python train.py --max-iters 2' (from the repository root).",
        max_length=1000,
    )
    tests: bool = Field(
        default=True, description="Run the test files that import a changed module."
    )
    examples: bool = Field(
        default=True,
        description="Run the Python blocks of the repository's Markdown files (README, docs) "
        "that name a changed class, with the blocks before them in the same file.",
    )
    guess: bool = Field(
        default=True,
        description="Where none of that calls a changed class, guess: build it from its "
        "constructor's signature (a config object with its defaults, sizes by their names; "
        "not over 2**28 parameter values) unless the repository's code built it, and call it "
        "with small inputs shaped for its first layer. A guessed target says so; freeze it "
        "with kernelpilot targets --write to set real sizes.",
    )
    timeout_s: float = Field(
        default=300.0, gt=0, description="How long the tests, examples or command may run."
    )


class ProjectTargets(BaseModel):
    """The targets one pyproject.toml configures, and its dtype: what the harness reads of a
    ``[tool.kernelpilot]`` table (the rest of it is other layers' settings, ``bot.settings``)."""

    pyproject: Path = Field(description="The file that configures them.")
    dtype: str = Field(default="float32", description="The project's dtype.")
    targets: list[TargetConfig] = Field(default_factory=list, description="Modules to optimize.")


TableReader = Callable[[Path], "dict | None"]


def kernelpilot_table(pyproject: Path) -> dict | None:
    """The ``[tool.kernelpilot]`` table of a pyproject.toml on disk; None without one."""
    found = read_toml(pyproject).get("tool", {}).get("kernelpilot")
    return found if isinstance(found, dict) else None


def nearest_project(start: Path, read: TableReader = kernelpilot_table) -> tuple[Path, dict] | None:
    """The nearest pyproject.toml at or above ``start`` that has a [tool.kernelpilot] table, and
    that table; ``read`` reads a file's table (a run's reader reads each file once)."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            table = read(candidate)
            if table is not None:
                return candidate, table
    return None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start`` that has a [tool.kernelpilot] table."""
    found = nearest_project(start)
    return found[0] if found else None


def project_targets(start: Path, read: TableReader = kernelpilot_table) -> ProjectTargets | None:
    """The targets and dtype of the nearest project at or above ``start``; None without one.
    Only those keys are checked here: the whole table is ``bot.settings``'s to check."""
    found = nearest_project(start, read)
    if found is None:
        return None
    pyproject, table = found
    try:
        return ProjectTargets.model_validate(
            {"pyproject": pyproject, "dtype": table.get("dtype", "float32"),
             "targets": table.get("targets", [])}
        )  # fmt: skip
    except ValidationError as err:
        raise setting_error(err, str(pyproject), "tool.kernelpilot") from None


def setting_error(err: ValidationError, where: str, prefix: str) -> UserError:
    """A bad setting as a UserError naming its file (``where``) and key (the first of
    ``err``'s, under the table ``prefix``), and where the allowed ones are listed."""
    first = err.errors()[0]
    key = ".".join(str(part) for part in [prefix, *first["loc"]])
    return UserError(
        f"invalid [tool.kernelpilot] setting: {first['msg']}",
        where=f"{where}: {key}",
        fix="see the README's configuration section for the allowed keys and values",
    )


def read_toml(path: Path) -> dict:
    """A TOML file on disk, parsed; a UserError naming it when it is not UTF-8 or not TOML."""
    text = read_user_text(path, "pyproject.toml")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise UserError(
            f"cannot parse TOML: {err}", where=str(path), fix="fix the syntax"
        ) from None
