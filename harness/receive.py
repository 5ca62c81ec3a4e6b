"""The parent's side of a candidate worker's cases: each case's outputs, as the worker hands
them over, loaded and compared here, where no candidate code runs.

The worker announces each case on its channel; the announcement is untrusted (a candidate
in that process could send anything), so the parent checks it names the next case, loads the
file as plain tensors, removes it, and compares it with the reference's outputs of that case.
The answer decides whether the worker goes on: the first wrong case ends the run.
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.jobs import outputs_file
from harness.reference import ReferenceData
from harness.streams import STREAM_HINT
from harness.tolerance import CaseComparer


class CaseReceiver:
    def __init__(self, data: ReferenceData, comparer: CaseComparer, job_dir: Path) -> None:
        self.data, self.comparer, self.job_dir = data, comparer, job_dir

    def __call__(self, body: object) -> bool:
        """Compare the case ``body`` announces; True: right, go on."""
        comparer, cases = self.comparer, self.data.cases
        number = comparer.compared
        if not isinstance(body, dict) or body.get("case") != number or number >= len(cases):
            comparer.failed = f"the worker announced outputs out of order ({body!r})"
            return False
        spec = cases[number]
        path = self.job_dir / outputs_file(number)
        if not path.is_file():
            comparer.failed = f"{spec.name}: the worker announced outputs it did not write"
            return False
        produced = torch.load(path, weights_only=True)
        path.unlink()
        if not isinstance(produced, list) or not all(type(t) is torch.Tensor for t in produced):
            comparer.failed = f"{spec.name}: the outputs file holds no list of tensors"
            return False
        repeat = spec.kind == "repeat"
        if comparer.add(spec.name, produced, self.data.outputs(spec), repeat):
            return True
        if repeat and spec.async_stream and comparer.check != "deterministic_outputs":
            comparer.failed = (
                f"{comparer.failed}: right on the same inputs and parameters on the default "
                "stream, wrong when they were still being produced on a busy non-default "
                f"current stream at the call: {STREAM_HINT}"
            )
        return False
