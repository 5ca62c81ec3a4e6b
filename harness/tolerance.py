"""Dtype-aware comparison of a candidate's output with the reference's (pure functions)."""

from __future__ import annotations

import torch
from pydantic import BaseModel

# (relative-norm limit, elementwise atol and rtol, both relative to the output's RMS for atol).
# float32 sits well under tf32's ~3e-4, so TF32 or half intermediates in a float32 problem fail.
_DEFAULTS = {
    "float32": (2e-5, 1e-4, 1e-4),
    "float16": (2e-3, 1e-2, 1e-2),
    "bfloat16": (1.6e-2, 4e-2, 4e-2),
}


class Tolerance(BaseModel):
    rel_norm: float
    atol: float
    rtol: float


class Comparison(BaseModel):
    passed: bool
    max_abs_error: float
    rel_error: float
    detail: str = ""


def tolerance_for(dtype: str, atol: float | None = None, rtol: float | None = None) -> Tolerance:
    rel_norm, default_atol, default_rtol = _DEFAULTS[dtype]
    return Tolerance(
        rel_norm=max(rel_norm, rtol or 0.0),
        atol=default_atol if atol is None else atol,
        rtol=default_rtol if rtol is None else rtol,
    )


def compare(output: torch.Tensor, reference: torch.Tensor, tol: Tolerance) -> Comparison:
    """Relative-norm error plus elementwise allclose, computed in float64 on the CPU."""
    if output.shape != reference.shape:
        return Comparison(
            passed=False,
            max_abs_error=float("inf"),
            rel_error=float("inf"),
            detail=f"shape {tuple(output.shape)} != reference {tuple(reference.shape)}",
        )
    if output.dtype != reference.dtype:
        return Comparison(
            passed=False,
            max_abs_error=float("inf"),
            rel_error=float("inf"),
            detail=f"dtype {output.dtype} != reference {reference.dtype}",
        )
    out = output.detach().to("cpu", torch.float64)
    ref = reference.detach().to("cpu", torch.float64)
    if not torch.isfinite(out).all():
        bad = int((~torch.isfinite(out)).sum())
        return Comparison(
            passed=False,
            max_abs_error=float("inf"),
            rel_error=float("inf"),
            detail=f"{bad} of {out.numel()} elements are NaN/Inf (unwritten or out-of-bounds?)",
        )
    if out.numel() == 0:
        return Comparison(passed=True, max_abs_error=0.0, rel_error=0.0)
    diff = (out - ref).abs()
    ref_norm = float(ref.norm())
    rel_error = float(diff.norm()) / ref_norm if ref_norm > 0 else float(diff.norm())
    scale = float(ref.pow(2).mean().sqrt()) or 1.0
    within = diff <= tol.atol * scale + tol.rtol * ref.abs()
    max_abs = float(diff.max())
    if rel_error > tol.rel_norm:
        return Comparison(
            passed=False,
            max_abs_error=max_abs,
            rel_error=rel_error,
            detail=f"relative error {rel_error:.3g} > {tol.rel_norm:.3g}",
        )
    if not bool(within.all()):
        wrong = int((~within).sum())
        first = tuple(int(i) for i in (~within).nonzero()[0].tolist())
        return Comparison(
            passed=False,
            max_abs_error=max_abs,
            rel_error=rel_error,
            detail=f"{wrong} of {out.numel()} elements outside tolerance, first at index {first}",
        )
    return Comparison(passed=True, max_abs_error=max_abs, rel_error=rel_error)
