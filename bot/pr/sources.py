"""How a target's module and inputs are built, as the follow-up's test builds them: a record of
``results.json``, untrusted to the publishing job. Every field that goes into generated code is
checked here: names are identifiers, paths relative paths inside the repository, literals JSON
values with finite numbers, a captured constructor call literals and calls of names imported
from the target's own package, captured inputs torch dtypes and finite numbers."""

from __future__ import annotations

import keyword
import math
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from harness.capture.freeze import IMPORT_LINE, safe_expression
from harness.capture.records import ArgSpec
from harness.errors import UserError
from harness.records import Problem


class TargetSource(BaseModel):
    """How a target's module and inputs are built, relative to the repository root: what the
    follow-up pull request's test file does to check the kernel against the original."""

    module_path: str
    class_name: str
    inputs_path: str | None = None
    inputs_fn: str | None = None
    input_shapes: list[list[int]] | None = None
    captured_inputs: list[ArgSpec] | None = Field(
        default=None, description="A captured call's arguments: tensors drawn like them."
    )
    input_keywords: list[str] = Field(default_factory=list, max_length=64)
    init_fn: str | None = None
    init_args: list = Field(default_factory=list)
    init_kwargs: dict = Field(default_factory=dict)
    init_captured: bool = Field(
        default=False, description="The constructor's arguments were captured (config objects)."
    )
    init_call: str | None = Field(
        default=None,
        description="Those arguments as an expression (a list, or a dict of keyword ones) over "
        "init_imports' names, where they could be written out; else no follow-up.",
        max_length=4000,
    )
    init_imports: list[str] = Field(default_factory=list, max_length=32)
    dtype: Literal["float32", "float16", "bfloat16"] = "float32"
    device: Literal["cpu", "cuda"] = "cpu"
    atol: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    rtol: float | None = Field(default=None, ge=0, allow_inf_nan=False)

    @field_validator("class_name", "inputs_fn", "init_fn")
    @classmethod
    def _identifier(cls, name: str | None) -> str | None:
        """These go into the follow-up's Python as names: identifiers, nothing else."""
        if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
            raise ValueError(f"{name!r} is not a Python identifier")
        return name

    @field_validator("input_keywords")
    @classmethod
    def _keywords(cls, names: list[str]) -> list[str]:
        for name in names:
            cls._identifier(name)
        return names

    @model_validator(mode="after")
    def _init_call_safe(self) -> TargetSource:
        """Written into the follow-up's test as code: literals and calls of names imported
        from the repository's own modules, nothing else (``harness.capture.freeze``)."""
        own = PurePosixPath(self.module_path).with_suffix("").parts
        for line in self.init_imports:
            module = line.split()[1] if IMPORT_LINE.match(line) else ""
            # the target's own module, or one of its top-level package: never `from os import`
            within = len(own) > 1 and module.split(".")[0] == own[0]
            if module != ".".join(own) and not within:
                raise ValueError(f"{line!r} is not an import from the target's own package")
        if self.init_call is not None:
            names = {line.split()[-1] for line in self.init_imports}
            if safe_expression(self.init_call, names) is None:
                raise ValueError("init_call is not literals and calls of its imported names")
        return self

    @property
    def constructible(self) -> bool:
        """Whether the follow-up's test can build the module as it was verified."""
        return not self.init_captured or self.init_call is not None

    @field_validator("module_path", "inputs_path")
    @classmethod
    def _inside(cls, path: str | None) -> str | None:
        if path is not None:
            try:
                safe_relative_path(path, "results: sources")
            except UserError as err:
                raise ValueError(err.what) from None
            if not path.endswith(".py"):
                raise ValueError(f"{path!r} is not a .py file")
        return path

    @field_validator("init_args", "init_kwargs")
    @classmethod
    def _finite(cls, values: list | dict) -> list | dict:
        """Written into the follow-up's test as Python literals: JSON values, finite numbers."""
        _check_literal(values)
        return values

    @classmethod
    def of(cls, problem: Problem, root: Path) -> TargetSource:
        """``problem`` with its paths made relative to ``root``: the fields they share are
        ``Problem``'s own, read through this stricter model."""

        def relative(path: Path) -> str:
            return path.resolve().relative_to(root.resolve()).as_posix()

        shared = problem.model_dump(include=set(cls.model_fields) - {"module_path"})
        shared["inputs_path"] = relative(problem.inputs_path) if problem.inputs_path else None
        shared["init_captured"] = problem.init_capture is not None
        return cls(module_path=relative(problem.source_path), **shared)


def _check_literal(value: object) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    if isinstance(value, list):
        for item in value:
            _check_literal(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{key!r} is not a string key")
            _check_literal(item)
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise ValueError(f"{value!r} is not a JSON value")


def safe_relative_path(text: str, where: str) -> PurePosixPath:
    """A path inside the repository that kernelpilot may write beside: relative, normalized,
    no ``..``, not under ``.git`` or ``.github``."""
    path = PurePosixPath(text)
    bad = (
        not text
        or path.is_absolute()
        or "\\" in text
        or any(part in ("..", ".", "") for part in text.split("/"))
        or path.parts[0] in (".git", ".github")
        or any(ord(char) < 32 for char in text)
    )
    if bad:
        raise UserError(
            f"refusing the path {text!r}",
            where=where,
            fix="a target must be a .py file inside the repository, outside .git and .github",
        )
    return path
