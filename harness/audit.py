"""Is a problem's spec strong enough to tell an honest kernel from a null answer?

A spec is weak when zeros, a constant, an input passed through, or another seed's output already
passes the correctness check on every seed, or when the reference itself is nondeterministic.
"""

from __future__ import annotations

import torch

from harness.records import AuditFinding, AuditReport, Problem
from harness.tolerance import Tolerance, compare

Case = tuple[list, list[torch.Tensor]]  # (inputs, reference outputs)


def null_answers(inputs: list, outputs: list[torch.Tensor], others: list[list[torch.Tensor]]):
    """Named null answers for one case, what a kernel doing no real work could return: (name,
    output index, a function making the answer). Made on demand: each can be GBs."""
    for index, out in enumerate(outputs):
        yield f"zeros for output {index}", index, lambda out=out: torch.zeros_like(out)
        if out.is_floating_point() and out.numel():
            yield (
                f"a constant (its mean) for output {index}",
                index,
                lambda out=out: torch.full_like(out, float(out.float().mean())),
            )
        for position, value in enumerate(inputs):
            if (
                isinstance(value, torch.Tensor)
                and value.shape == out.shape
                and value.dtype == out.dtype
            ):
                yield f"input {position} passed through as output {index}", index, lambda v=value: v
        for other in others:
            if len(other) > index and other[index].shape == out.shape:
                yield f"another seed's output {index}", index, lambda o=other[index]: o


def null_answer_findings(cases: list[Case], tol: Tolerance) -> list[AuditFinding]:
    """Null answers that pass on every case (one that fails a case is not tried again)."""
    passing: list[str] | None = None  # in the order first seen; None before the first case
    for number, (inputs, outputs) in enumerate(cases):
        others = [case[1] for other_number, case in enumerate(cases) if other_number != number]
        here: list[str] = []
        for name, index, answer in null_answers(inputs, outputs, others):
            if name in here or (passing is not None and name not in passing):
                continue
            if compare(answer(), outputs[index], tol).passed:
                here.append(name)
        passing = here if passing is None else [name for name in passing if name in here]
        if not passing:
            break
    return [
        AuditFinding(
            kind="null_answer",
            detail=f"{name} passes the correctness check on all {len(cases)} seeds",
            fix="make inputs signed and varied (torch.randn rather than torch.rand or constants), "
            "at a scale where the output depends on them; check that the module's output is not "
            "constant",
        )
        for name in passing or []
    ]


def nondeterminism_finding(first: list[torch.Tensor], second: list[torch.Tensor], tol: Tolerance):
    for index, (a, b) in enumerate(zip(first, second, strict=True)):
        result = compare(a, b, tol)
        if not result.passed:
            return AuditFinding(
                kind="nondeterministic",
                detail=f"two runs of the reference on the same inputs differ in output {index}: "
                f"{result.detail}",
                fix="make forward deterministic in eval() mode: no torch.rand/dropout with "
                "training=True inside forward, no F.dropout(x, training=True)",
            )
    return None


def audit_problem(problem: Problem, config=None) -> AuditReport:
    """Run the reference worker on ``problem`` and return its audit (used by ``kernelpilot audit``)."""
    from harness.reference import reference_data

    return reference_data(problem, config).report.audit
