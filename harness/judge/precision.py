"""The reference's own precision where PyTorch computes float32 in reduced precision.

PyTorch runs float32 convolutions through cuDNN in TF32 by default (``torch.backends.cudnn
.conv.fp32_precision == "tf32"``), and matmuls too where the user asked for it
(``torch.set_float32_matmul_precision("high")``). Such a reference is itself only as precise
as TF32 (about 1e-3 relative), and another algorithm for the same convolution (another layout,
torch.compile's) gets other roundings: held to the float32 tolerance (2e-5), an honest kernel
fails against it where the reference would fail against strict float32 too.

So the reference worker runs its first case again with every float32 setting strict
(``strict_float32``) and measures how far its own outputs are from that (``measure``). A
candidate is held to ``FACTOR`` times that distance, where it is wider than the dtype's
tolerance (``held_to``): within 2x the reference's error from the strict answer, the
candidate is at most 3x away from the reference. Never wider than ``CAP`` (the float16
tolerance): what the parent takes from the reference worker is bounded. A candidate that
rounds further than the reference does (bfloat16 against a TF32 reference, TF32 against a
strict one) still fails.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated

import torch
from pydantic import BaseModel, Field, StringConstraints

from harness.judge.tolerance import CaseComparer, Tolerance, error_sums, tolerance_for
from harness.records import Problem

FACTOR = 3.0
CAP = tolerance_for("float16")

# (backend, op) of each float32 precision setting, by device; its backend's and the generic
# setting apply where it says "none".
SETTINGS = {
    "cuda": [("cuda", "matmul"), ("cudnn", "conv"), ("cudnn", "rnn")],
    "cpu": [("mkldnn", "matmul"), ("mkldnn", "conv"), ("mkldnn", "rnn")],
}
LEAVES = [leaf for leaves in SETTINGS.values() for leaf in leaves]
STRICT = ("none", "ieee")


Setting = Annotated[
    str, StringConstraints(max_length=80, pattern=r"^torch\.backends\.[A-Za-z0-9_.]+=[A-Za-z0-9]+$")
]


class ReferencePrecision(BaseModel):
    """How far the reference's outputs on its first case are from the same case computed with
    every float32 setting strict: the largest over its outputs. Made in the reference worker
    (the user's code): bounded here, and bounded again by ``held_to``."""

    settings: list[Setting] = Field(
        max_length=8, description="The reduced-precision settings that were on."
    )
    rel_norm: float = Field(ge=0, allow_inf_nan=False, description="||ref - strict|| / ||strict||.")
    max_abs: float = Field(
        ge=0, allow_inf_nan=False, description="Largest elementwise distance over the strict RMS."
    )


def _setting(backend: str, op: str) -> object:
    return getattr(getattr(torch.backends, backend), op)


def _per_backend() -> bool:
    """Whether this torch has the per-backend ``fp32_precision`` settings (2.9 and later)."""
    return all(hasattr(_setting(b, op), "fp32_precision") for b, op in LEAVES) and hasattr(
        torch.backends, "fp32_precision"
    )


def _legacy() -> tuple[bool, bool, str] | None:
    """(cudnn.allow_tf32, cuda.matmul.allow_tf32, float32 matmul precision), or None where
    PyTorch refuses to read them: the per-backend API set values they cannot express."""
    try:
        return (
            bool(torch.backends.cudnn.allow_tf32),
            bool(torch.backends.cuda.matmul.allow_tf32),
            torch.get_float32_matmul_precision(),
        )
    except RuntimeError:
        return None


def float32_settings() -> dict[str, str]:
    """Every float32 precision setting as it is now, by name. Read through the per-backend
    API: PyTorch refuses to read the older ``allow_tf32`` flags once the two APIs have set
    different values (``torch.backends.cudnn.conv.fp32_precision = "ieee"`` alone does)."""
    if not _per_backend():
        return {
            "torch.backends.cuda.matmul.allow_tf32": str(torch.backends.cuda.matmul.allow_tf32),
            "torch.backends.cudnn.allow_tf32": str(torch.backends.cudnn.allow_tf32),
            "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        }
    settings = {}
    for name in ["", *sorted({b for b, _ in LEAVES}), *(f"{b}.{op}" for b, op in LEAVES)]:
        where = torch.backends
        for part in filter(None, name.split(".")):
            where = getattr(where, part)
        value = getattr(where, "fp32_precision", None)  # torch.backends.cuda has none
        if value is not None:
            settings[f"torch.backends.{name + '.' if name else ''}fp32_precision"] = str(value)
    return settings


def reduced_settings(device: str) -> list[str]:
    """The float32 settings now on for ``device`` that compute in less than float32, as
    ``torch.backends.cudnn.conv.fp32_precision=tf32``."""
    if not _per_backend():
        legacy = _legacy()
        if legacy is None or device != "cuda":
            return []
        flags = [("cudnn.allow_tf32", legacy[0]), ("cuda.matmul.allow_tf32", legacy[1])]
        return [f"torch.backends.{flag}=True" for flag, on in flags if on]
    return [
        f"torch.backends.{backend}.{op}.fp32_precision={_effective(backend, op)}"
        for backend, op in SETTINGS.get(device, [])
        if _effective(backend, op) not in STRICT
    ]


def _effective(backend: str, op: str) -> str:
    """One per-backend setting as it applies: its own value, else its backend's, else the
    generic one ("none" all the way: strict)."""
    chain = [
        _setting(backend, op).fp32_precision,  # type: ignore[attr-defined]
        getattr(getattr(torch.backends, backend), "fp32_precision", "none"),
        torch.backends.fp32_precision,  # type: ignore[attr-defined]
    ]
    return next((value for value in chain if value != "none"), "none")


@contextmanager
def strict_float32(device: str) -> Iterator[None]:
    """Every float32 setting of ``device`` strict inside, as it was after. Through the older
    flags where PyTorch can read them (a forward that reads ``allow_tf32`` then still can),
    then per backend for what they leave reduced."""
    legacy = _legacy()
    undo: list[Callable[[], None]] = []
    try:
        if legacy is not None:
            conv, matmul, precision = legacy
            if conv:
                torch.backends.cudnn.allow_tf32 = False
                undo.append(functools.partial(setattr, torch.backends.cudnn, "allow_tf32", conv))
            if precision != "highest":
                torch.set_float32_matmul_precision("highest")
                undo.append(functools.partial(torch.set_float32_matmul_precision, precision))
            if torch.backends.cuda.matmul.allow_tf32:
                torch.backends.cuda.matmul.allow_tf32 = False
                undo.append(
                    functools.partial(setattr, torch.backends.cuda.matmul, "allow_tf32", matmul)
                )
        if _per_backend():
            for backend, op in SETTINGS.get(device, []):
                if _effective(backend, op) in STRICT:
                    continue
                leaf = _setting(backend, op)
                before = leaf.fp32_precision  # type: ignore[attr-defined]
                leaf.fp32_precision = "ieee"  # type: ignore[attr-defined]
                undo.append(functools.partial(setattr, leaf, "fp32_precision", before))
        yield
    finally:
        for step in reversed(undo):
            step()


def measure(
    outputs: list[torch.Tensor], strict: list[torch.Tensor], settings: list[str]
) -> ReferencePrecision | None:
    """The distance of ``outputs`` from ``strict``; None where they agree bit for bit."""
    if all(torch.equal(a, b) for a, b in zip(outputs, strict, strict=True)):
        return None
    rel_norm = max_abs = 0.0
    for out, exact in zip(outputs, strict, strict=True):
        if not out.is_floating_point() or out.shape != exact.shape or out.numel() == 0:
            continue
        sums = error_sums(out.detach().reshape(-1), exact.detach().reshape(-1), 0.0)
        _, diff_sq, exact_sq, largest, _ = (float(x) for x in sums.tolist())
        rel_norm = max(rel_norm, math.sqrt(diff_sq / exact_sq) if exact_sq else 0.0)
        max_abs = max(max_abs, largest / (math.sqrt(exact_sq / out.numel()) or 1.0))
    if not (math.isfinite(rel_norm) and math.isfinite(max_abs)):
        return None  # a non-finite output is the reference's own error, said elsewhere
    return ReferencePrecision(settings=settings, rel_norm=rel_norm, max_abs=max_abs)


def held_to(problem: Problem, precision: ReferencePrecision | None) -> Tolerance:
    """The tolerance a candidate for ``problem`` is held to: the problem's, widened to
    ``FACTOR`` times the reference's own distance from strict float32, up to ``CAP``. A
    target's own ``atol``/``rtol`` are kept as they are: whoever set them chose."""
    tol = tolerance_for(problem.dtype, problem.atol, problem.rtol)
    explicit = problem.atol is not None or problem.rtol is not None
    if precision is None or problem.dtype != "float32" or explicit:
        return tol
    return Tolerance(
        rel_norm=max(tol.rel_norm, min(FACTOR * precision.rel_norm, CAP.rel_norm)),
        atol=max(tol.atol, min(FACTOR * precision.max_abs, CAP.atol)),
        rtol=tol.rtol,
    )


def describe(problem: Problem, precision: ReferencePrecision | None) -> str:
    """What a report says of the tolerance, where the reference's precision widened it."""
    tol = tolerance_for(problem.dtype, problem.atol, problem.rtol)
    held = held_to(problem, precision)
    if precision is None or held == tol:
        return ""
    return (
        f"held to {FACTOR:g}x the reference's own error against strict float32 "
        f"({', '.join(precision.settings)}: relative norm {precision.rel_norm:.2g}, largest "
        f"{precision.max_abs:.2g} x RMS): relative norm {held.rel_norm:.2g}, atol "
        f"{held.atol:.2g} x RMS"
    )


def comparer(
    problem: Problem, total: int, deterministic: bool, precision: ReferencePrecision | None
) -> CaseComparer:
    """The case-by-case comparison of a candidate's outputs, held to ``held_to``."""
    return CaseComparer(
        problem,
        total,
        deterministic,
        tol=held_to(problem, precision),
        held=describe(problem, precision),
    )
