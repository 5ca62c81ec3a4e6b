"""The checks on calls outside the trusted comparison: the candidate's timed calls (against
eager, plain tensors, no alias, inputs unchanged, fresh memory) and the snapshots a cheat would
patch, for both candidate workers (``harness.workers.candidate``, ``harness.workers.timing``)."""

from __future__ import annotations

from typing import Literal

import torch

from harness.judge.precision import held_to
from harness.judge.tolerance import compare
from harness.records import Check, Status
from harness.sandbox.jobs import CheckFailed, WorkerJob
from harness.workers import guards
from harness.workers.calls import NotAnOutput, describe_form, leaves

Window = Literal["settle", "alone", "beside", "after"]


def check_unpatched(job: WorkerJob, before: dict[str, int], checks: list[Check], when: str) -> None:
    """Fail when a function, hook, dispatcher entry or setting of torch or the harness changed."""
    patched = guards.changed(before, guards.snapshot(job.reference_ops))
    if patched:
        raise CheckFailed(
            Status.rejected, "no_monkeypatching", f"changed during {when}: {', '.join(patched[:8])}"
        )
    checks[:] = [check for check in checks if check.name != "no_monkeypatching"]
    checks.append(
        Check(
            name="no_monkeypatching",
            passed=True,
            detail="torch, timers, hooks, dispatcher and harness intact",
        )
    )


def check_fresh(outputs: list, previous: list, where: str) -> None:
    """Outputs must not reuse the memory of the previous call's outputs, still held here.

    A module that hands out the same buffer every call overwrites results its caller still
    holds, and skips the allocation that the reference pays for.
    """
    failure = reused_memory(outputs, previous, where)
    if failure is not None:
        raise failure


def reused_memory(outputs: list, previous: list, where: str) -> CheckFailed | None:
    if any(guards.overlaps(out, old) for out in outputs for old in previous):
        return CheckFailed(
            Status.incorrect,
            "fresh_outputs",
            f"{where}: an output shares memory with the previous call's output "
            "(one buffer reused across calls overwrites results the caller still holds)",
        )
    return None


class TimedChecks:
    """The checks on every timed candidate call (outside the timer).

    Outside the ``beside`` window the reference is in the candidate's place: the same work is
    done, and what it finds is no verdict on anything.
    """

    def __init__(self, job: WorkerJob, window: Window = "beside") -> None:
        self.tolerance = held_to(job.problem, job.precision)
        self.window = window
        self.stand_in = window != "beside"
        self.originals: list = []
        self.previous: list[torch.Tensor] = []  # kept alive: its memory cannot be reused

    def fail(self, failure: CheckFailed) -> None:
        if not self.stand_in:
            raise failure

    def before(self, inputs: list) -> None:
        self.originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]

    def after_candidate(self, rep: int, inputs: list, result) -> None:
        """Right after the candidate's call, before any baseline sees the inputs."""
        outputs = _leaves(result, rep)[0]
        for out in outputs:
            if type(out) is not torch.Tensor:
                self.fail(
                    CheckFailed(
                        Status.rejected,
                        "plain_tensor_outputs",
                        f"timed call {rep}: output is {type(out).__name__}",
                    )
                )
            elif any(isinstance(x, torch.Tensor) and guards.overlaps(out, x) for x in inputs):
                self.fail(
                    CheckFailed(
                        Status.incorrect,
                        "no_input_alias",
                        f"timed call {rep}: an output shares memory with an input",
                    )
                )
        for position, (now, then) in enumerate(zip(inputs, self.originals, strict=True)):
            if isinstance(now, torch.Tensor) and not guards.same_values(now, then):
                self.fail(
                    CheckFailed(
                        Status.incorrect,
                        "inputs_unchanged",
                        f"timed call {rep}: input {position} was modified",
                    )
                )
        reused = reused_memory(outputs, self.previous, f"timed call {rep}")
        if reused is not None:
            self.fail(reused)
        self.previous = outputs

    def against_eager(self, rep: int, results: dict) -> None:
        (outputs, form), (expected, eager_form) = (
            _leaves(results["candidate"], rep),
            _leaves(results["eager"], rep),
        )
        if form != eager_form:
            self.fail(
                CheckFailed(
                    Status.incorrect,
                    "output_form",
                    f"timed call {rep}: returned {describe_form(form)} where eager returns "
                    f"{describe_form(eager_form)} (T: a tensor)",
                )
            )
            return
        for out, ref in zip(outputs, expected, strict=True):
            result = compare(out, ref, self.tolerance)
            if not result.passed:
                self.fail(
                    CheckFailed(
                        Status.incorrect,
                        "timed_outputs_correct",
                        f"timed call {rep}: {result.detail}",
                    )
                )


def _leaves(value, rep: int) -> tuple[list, str]:
    try:
        return leaves(value)
    except NotAnOutput as err:
        raise CheckFailed(
            Status.rejected, "plain_tensor_outputs", f"timed call {rep}: the result holds {err}"
        ) from None
