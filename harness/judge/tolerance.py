"""Dtype-aware comparison of a candidate's outputs with the reference's (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from pydantic import BaseModel

from harness.records import Check, Problem

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


class CaseComparison(BaseModel):
    """A candidate's outputs against the reference's, over the cases it produced outputs for."""

    failed: str | None  # the first failure: which case, which output, what
    compared: int  # cases compared (fewer than there are when a later case raised)
    stopped: bool = False  # the comparison itself could not go on (the comparator stopped)
    checks: list[Check]
    max_abs_error: float | None
    rel_error: float | None


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


# Elements per step of a comparison: float64 copies of one step stay in the CPU's cache
# (the whole-tensor float64 copies they replace cost seconds per output at 10^8 elements).
# On a GPU one step is large: every step costs a launch, and the memory is there.
CHUNK = {"cpu": 1 << 17, "cuda": 1 << 26}


def compare(
    output: torch.Tensor, reference: torch.Tensor, tol: Tolerance, explain: bool = True
) -> Comparison:
    """Relative-norm error plus elementwise allclose, accumulated in float64 on the
    reference's device, chunk by chunk.

    Elementwise: ``|out - ref| <= atol * rms(ref) + rtol * |ref|`` everywhere, decided in the
    same pass as the norms: it holds iff the largest ``|out - ref| - rtol * |ref|`` is at most
    ``atol * rms(ref)``. Counting the elements outside and finding the first one takes a second
    pass, only on failure, and only to ``explain`` it.
    """
    if output.shape != reference.shape:
        return _mismatch(f"shape {tuple(output.shape)} != reference {tuple(reference.shape)}")
    if output.dtype != reference.dtype:
        return _mismatch(f"dtype {output.dtype} != reference {reference.dtype}")
    ref = reference.detach().reshape(-1)
    out = output.detach().to(ref.device).reshape(-1)
    if out.numel() == 0:
        return Comparison(passed=True, max_abs_error=0.0, rel_error=0.0)
    sums = error_sums(out, ref, tol.rtol)
    nonfinite, diff_sq, ref_sq, max_abs, slack = (float(x) for x in sums.tolist())
    if nonfinite:
        return Comparison(
            passed=False,
            max_abs_error=float("inf"),
            rel_error=float("inf"),
            detail=f"{int(nonfinite)} of {out.numel()} elements are NaN/Inf "
            "(unwritten or out-of-bounds?)",
        )
    rel_error = math.sqrt(diff_sq / ref_sq) if ref_sq > 0 else math.sqrt(diff_sq)
    scale = math.sqrt(ref_sq / out.numel()) or 1.0
    if rel_error > tol.rel_norm:
        return Comparison(
            passed=False,
            max_abs_error=max_abs,
            rel_error=rel_error,
            detail=f"relative error {rel_error:.3g} > {tol.rel_norm:.3g}",
        )
    if slack > tol.atol * scale and not explain:  # a verdict without the count: one pass
        return Comparison(
            passed=False, max_abs_error=max_abs, rel_error=rel_error, detail="outside tolerance"
        )
    if slack > tol.atol * scale:
        wrong, first = _outside(out, ref, tol.atol * scale, tol.rtol)
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(first), output.shape))
        return Comparison(
            passed=False,
            max_abs_error=max_abs,
            rel_error=rel_error,
            detail=f"{wrong} of {out.numel()} elements outside tolerance, first at index {index}",
        )
    return Comparison(passed=True, max_abs_error=max_abs, rel_error=rel_error)


# Elements a sampled check looks at (spread evenly over the tensor).
SAMPLE = 1 << 16


def reference_scale(reference: torch.Tensor) -> float:
    """The reference's RMS over all its elements, as ``compare`` scales ``atol`` by (1.0 where
    it is 0): one chunked float64 pass over the reference."""
    ref = reference.detach().reshape(-1)
    count = ref.numel()
    ref_sq = torch.zeros((), dtype=torch.float64, device=ref.device)
    chunk = CHUNK.get(ref.device.type, CHUNK["cpu"])
    for start in range(0, count, chunk):
        step = ref[start : start + chunk].double()
        ref_sq += torch.dot(step, step)
    return math.sqrt(float(ref_sq) / max(count, 1)) or 1.0


def fails_on_sample(
    output: torch.Tensor,
    reference: torch.Tensor,
    tol: Tolerance,
    scale: Callable[[], float] | None = None,
) -> bool:
    """True when a sample of the elements alone proves ``compare`` fails: one sampled element
    outside the elementwise bound, whose scale (the reference's RMS) is taken over the whole
    reference, as ``compare`` takes it. False says nothing: compare in full then.

    A null answer (zeros, a constant, an input) is wrong almost everywhere, so the sample
    decides it for the price of one pass over the reference instead of a full comparison.
    ``scale``, where given, returns ``reference_scale(reference)`` instead (a caller trying
    several answers against one reference takes that pass once).
    """
    if output.shape != reference.shape or output.dtype != reference.dtype:
        return True
    count = reference.numel()
    if count == 0 or not reference.is_floating_point():
        return False
    rms = scale() if scale is not None else reference_scale(reference)
    index = torch.arange(0, count, max(1, count // SAMPLE), device=reference.device)
    out = torch.take(output.detach().to(reference.device), index).double()
    sampled = torch.take(reference.detach(), index).double()
    slack = ((out - sampled).abs() - tol.rtol * sampled.abs()).nan_to_num(nan=math.inf)
    return bool(slack.max() > tol.atol * rms * 1.001)


def _steps(out: torch.Tensor, ref: torch.Tensor):
    step = CHUNK.get(ref.device.type, CHUNK["cpu"])
    for start in range(0, ref.numel(), step):
        yield start, out[start : start + step].double(), ref[start : start + step].double()


def error_sums(out: torch.Tensor, ref: torch.Tensor, rtol: float) -> torch.Tensor:
    """[non-finite count, sum (out-ref)^2, sum ref^2, max |out-ref|, max |out-ref|-rtol|ref|],
    left on the device until the end (one synchronization)."""
    totals = torch.zeros(5, dtype=torch.float64, device=ref.device)
    for _, o, r in _steps(out, ref):
        diff = (o - r).abs_()
        step = torch.stack(
            [
                (~torch.isfinite(o)).sum(dtype=torch.float64),
                torch.dot(diff, diff),
                torch.dot(r, r),
                diff.max(),
                (diff - r.abs().mul_(rtol)).max(),
            ]
        )
        totals[:3] += step[:3]
        totals[3:] = torch.maximum(totals[3:], step[3:])
    return totals


def _outside(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> tuple[int, int]:
    """How many elements are outside the tolerance, and the flat index of the first."""
    wrong, first = 0, -1
    for start, o, r in _steps(out, ref):
        bad = ((o - r).abs_() > atol + rtol * r.abs()).nonzero()
        if first < 0 and bad.numel():
            first = start + int(bad[0])
        wrong += bad.numel()
    return wrong, first


def _mismatch(detail: str) -> Comparison:
    return Comparison(
        passed=False, max_abs_error=float("inf"), rel_error=float("inf"), detail=detail
    )


class CaseComparer:
    """A candidate's outputs against the reference's, one case at a time, in the parent.

    Cases arrive in order; the first that fails decides. A case that repeats an earlier one
    (same inputs) must also reproduce the candidate's own earlier outputs bit for bit where
    the reference does: a kernel that reads memory it never wrote gets other values there.
    """

    def __init__(
        self,
        problem: Problem,
        total: int,
        reference_deterministic: bool = False,
        tol: Tolerance | None = None,
        held: str = "",
    ):
        """``tol``: the tolerance (else the problem's), ``held``: what a report says of it
        where it is not the problem's own (harness.judge.precision)."""
        self.tol = tol or tolerance_for(problem.dtype, problem.atol, problem.rtol)
        self.held = held
        self.total = total
        self.deterministic = reference_deterministic
        self.compared = 0
        self.failed: str | None = None
        self.check = "correct_outputs"
        self.worst_abs, self.worst_rel = 0.0, 0.0
        self.names: list[str] = []
        self.first: list[torch.Tensor] | None = None  # the candidate's outputs on case 0

    def add(self, name: str, produced: list, expected: list, repeats_first: bool = False) -> bool:
        """Compare one case; False once a case failed (the rest are not looked at)."""
        if self.failed is not None:
            return False
        if self.compared >= self.total:
            self.failed = f"outputs for more than the {self.total} cases there are"
            return False
        self.compared += 1
        self.names.append(name.split(" (")[0])
        if len(produced) != len(expected):
            self.failed = f"{name}: {len(produced)} outputs, reference has {len(expected)}"
            return False
        for index, (out, ref) in enumerate(zip(produced, expected, strict=True)):
            result = compare(out, ref, self.tol)
            if not result.passed:
                self.check = "finite_outputs" if "NaN" in result.detail else "correct_outputs"
                self.failed = f"{name}, output {index}: {result.detail}"
                return False
            self.worst_abs = max(self.worst_abs, result.max_abs_error)
            self.worst_rel = max(self.worst_rel, result.rel_error)
        if self.compared == 1:
            self.first = produced
        elif repeats_first and self.deterministic and self.first is not None:
            self._same_as_first(name, produced)
            self.first = None
        return self.failed is None

    def _same_as_first(self, name: str, produced: list) -> None:
        for index, (now, then) in enumerate(zip(produced, self.first or [], strict=True)):
            if not torch.equal(now, then):
                differ = int((now != then).sum())
                self.check = "deterministic_outputs"
                self.failed = (
                    f"{name}, output {index}: {differ} of {now.numel()} elements differ from "
                    "the candidate's own outputs on the same inputs, where the reference is "
                    "deterministic bit for bit (memory read before it was written? a race?)"
                )
                return

    def result(self) -> CaseComparison:
        failed = self.failed
        detail = failed or f"{self.compared} cases: {', '.join(self.names)}"
        if self.held and failed is None:  # first: a report may cut a long detail short
            detail = f"{self.held}; {detail}"
        checks = [Check(name=self.check, passed=failed is None, detail=detail)]
        if failed is None:
            checks.append(Check(name="finite_outputs", passed=True, detail="no NaN/Inf"))
            if self.deterministic:
                checks.append(
                    Check(
                        name="deterministic_outputs",
                        passed=True,
                        detail="the same inputs again gave the same outputs, bit for bit",
                    )
                )
        return CaseComparison(
            failed=failed,
            compared=self.compared,
            checks=checks,
            max_abs_error=self.worst_abs if failed is None else None,
            rel_error=self.worst_rel if failed is None else None,
        )


def compare_cases(problem: Problem, cases: list[dict], outputs: list[list]) -> CaseComparison:
    """Compare a candidate's outputs with the reference's, case by case (runs in the parent)."""
    comparer = CaseComparer(problem, len(cases))
    for number, produced in enumerate(outputs):
        expected = cases[number]["outputs"] if number < len(cases) else []
        if not comparer.add(cases[min(number, len(cases) - 1)]["name"], produced, expected):
            break
    return comparer.result()
