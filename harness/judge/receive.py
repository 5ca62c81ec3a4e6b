"""The trusted side of a candidate worker's cases: each case's outputs, as the worker hands them
over, compared with the reference's where no candidate code runs.

The worker announces each case on its channel; the announcement is untrusted (a candidate in
that process could send anything), so the parent checks it names the next case before the
outputs are read (``harness.workers.handover``) and compared: here, with reference outputs the
reference worker stored (``CaseReceiver``), or in the comparator worker, with reference
outputs made again on the device (``harness.judge.comparator``). The answer decides whether the
worker goes on: the first wrong case ends the run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from harness.judge.tolerance import CaseComparer, CaseComparison
from harness.sandbox.jobs import CaseSpec
from harness.workers import handover
from harness.workers.streams import STREAM_HINT

if TYPE_CHECKING:
    from harness.problem.reference import ReferenceData


class Receiver(Protocol):
    """One candidate worker's announcements, answered in turn; then the comparison."""

    def at(self, job_dir: Path) -> Receiver: ...

    def __call__(self, body: object) -> bool: ...

    def result(self) -> CaseComparison | None: ...


def next_case(comparer: CaseComparer, cases: list[CaseSpec], body: object) -> CaseSpec | None:
    """The case an announcement must name (the next one), or None: out of order, recorded."""
    number = comparer.compared
    if not isinstance(body, dict) or body.get("case") != number or number >= len(cases):
        comparer.failed = f"the worker announced outputs out of order ({str(body)[:200]})"
        return None
    return cases[number]


def judge_case(
    comparer: CaseComparer,
    spec: CaseSpec,
    produced: list[torch.Tensor],
    expected: list[torch.Tensor],
) -> bool:
    """Compare one case; True: right, go on."""
    repeat = spec.kind == "repeat"
    if comparer.add(spec.name, produced, expected, repeat):
        return True
    if repeat and spec.async_stream and comparer.check != "deterministic_outputs":
        comparer.failed = (
            f"{comparer.failed}: right on the same inputs and parameters on the default "
            "stream, wrong when they were still being produced on a busy non-default "
            f"current stream at the call: {STREAM_HINT}"
        )
    return False


class CaseReceiver:
    """Cases compared in the parent, with the reference outputs the reference worker stored."""

    def __init__(self, data: ReferenceData, comparer: CaseComparer) -> None:
        self.data, self.comparer = data, comparer
        self.job_dir = Path()

    def at(self, job_dir: Path) -> CaseReceiver:
        """This receiver, reading the outputs files of the worker in ``job_dir``."""
        self.job_dir = job_dir
        return self

    def __call__(self, body: object) -> bool:
        spec = next_case(self.comparer, self.data.cases, body)
        if spec is None:
            return False
        assert isinstance(body, dict)
        try:
            produced = handover.receive(body, self.job_dir, self.comparer.compared, "file")
        except handover.HandoverError as err:
            self.comparer.failed = f"{spec.name}: {err}"
            return False
        return judge_case(self.comparer, spec, produced, self.data.outputs(spec))

    def result(self) -> CaseComparison | None:
        comparer = self.comparer
        return comparer.result() if comparer.compared or comparer.failed else None
