"""Is a problem's spec strong enough to tell an honest kernel from a null answer?

A spec is weak when zeros, a constant, an input passed through, or another seed's output already
passes the correctness check on every seed, or when the reference itself is nondeterministic.
"""

from __future__ import annotations

import functools

import torch

from harness.judge.tolerance import Tolerance, compare, fails_on_sample, reference_scale
from harness.records import AuditFinding, AuditReport, Problem

Case = tuple[list, list[torch.Tensor]]  # (inputs, reference outputs)


def null_answers(inputs: list, outputs: list[torch.Tensor], others: list[list[torch.Tensor]]):
    """Named null answers for one case, what a kernel doing no real work could return: (name,
    output index, a function making the answer). Made on demand; zeros and the constant are
    one element expanded to the output's shape, which a sample refutes without the GBs of
    memory a full tensor of them took beside the case."""
    for index, out in enumerate(outputs):
        yield f"zeros for output {index}", index, lambda out=out: _filled(out, 0)
        # Every element at the case's own mean: a check with no power over single elements.
        # Of a one-element output (a loss) that mean is the output itself, the right answer:
        # whether its value depends on the case at all is "another seed's output" below.
        if out.is_floating_point() and out.numel() > 1:
            yield (
                f"a constant (its mean) for output {index}",
                index,
                lambda out=out: _filled(out, float(out.mean())),
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


def _filled(out: torch.Tensor, value: float) -> torch.Tensor:
    """``value`` in every element of a tensor shaped as ``out``: one element, expanded."""
    return torch.full((), value, dtype=out.dtype, device=out.device).expand(out.shape)


class NullAnswerAudit:
    """Null answers that pass on every case, fed one case at a time (a case's tensors need not
    outlive its turn: only the previous case's outputs are kept, for "another seed's output").

    A null answer that fails a case is not tried again; once none is left, adding a case
    costs nothing. "Another seed's output" is first tried on the second case, both ways.
    """

    def __init__(self, tol: Tolerance) -> None:
        self.tol = tol
        self.cases = 0
        self.passing: list[str] | None = None  # in the order first seen; None before a case
        self.previous: list[torch.Tensor] | None = None

    def add(self, inputs: list, outputs: list[torch.Tensor]) -> None:
        previous, self.previous = self.previous, None
        self.cases += 1
        if self.passing is not None and not self.passing and self.cases > 2:
            return
        others = [previous] if previous is not None else []
        here: list[str] = []
        # Each output's RMS, taken once for all the answers tried against it (a pass over
        # GBs per answer was most of the audit's time on KernelBench's sizes).
        rms = functools.cache(lambda index: reference_scale(outputs[index]))
        for name, index, answer in null_answers(inputs, outputs, others):
            if name in here or not self._still_open(name):
                continue
            if not self._passes(answer(), outputs[index], functools.partial(rms, index)):
                continue
            if self.cases == 2 and name.startswith("another seed") and previous is not None:
                # The first case's turn: this case's output as the answer to it.
                if not self._passes(outputs[index], previous[index], None):
                    continue
            here.append(name)
        if self.passing is None:
            self.passing = here
        else:
            first_try = [n for n in here if n.startswith("another seed") and self.cases == 2]
            self.passing = [n for n in self.passing if n in here] + first_try
        # Kept for the next case only while "another seed's output" is still open: a case's
        # outputs can be GBs, and they would stay beside every later case for nothing.
        if self.cases < 2 or any(n.startswith("another seed") for n in self.passing):
            self.previous = outputs

    def _passes(self, answer: torch.Tensor, reference: torch.Tensor, scale) -> bool:
        """Whether a null answer passes the check (most are refuted by a sample alone);
        ``scale``: a function giving the reference's RMS, or None to take it here."""
        if fails_on_sample(answer, reference, self.tol, scale):
            return False
        return compare(answer, reference, self.tol, explain=False).passed

    def _still_open(self, name: str) -> bool:
        if self.passing is None or name in self.passing:
            return True
        return self.cases == 2 and name.startswith("another seed")

    def findings(self) -> list[AuditFinding]:
        return [
            AuditFinding(
                kind="null_answer",
                detail=f"{name} passes the correctness check on all {self.cases} seeds",
                fix="make inputs signed and varied (torch.randn rather than torch.rand or "
                "constants), at a scale where the output depends on them; check that the "
                "module's output is not constant",
            )
            for name in self.passing or []
        ]


def null_answer_findings(cases: list[Case], tol: Tolerance) -> list[AuditFinding]:
    """Null answers that pass on every case (one that fails a case is not tried again)."""
    audit = NullAnswerAudit(tol)
    for inputs, outputs in cases:
        audit.add(inputs, outputs)
    return audit.findings()


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
    from harness.problem.reference import reference_data

    return reference_data(problem, config).report.audit
