"""The GPUs a run checks and times candidates on: one candidate at a time on each.

A candidate's checks worker and timing workers, the problem's comparator beside them and its
compiled baseline's worker see one GPU only, through ``CUDA_VISIBLE_DEVICES``: code that says
"cuda" runs there, and the CUDA IPC handles between a candidate's worker and the comparator
name the same device. Builds are the parent's and serve every GPU (GPUs of one kind: a build is
for the architecture of the first). The reference worker runs once per problem, on the first.

Two limits (README, Limitations): the sandbox shows a worker every GPU's device node, so the
variable is what keeps it on its GPU; and while one GPU's candidate is timed, builds pause
(``harness.sandbox.quiet``) but the other GPUs' checks and comparators go on, which on a host
with few cores per GPU can make a timing window busy (``harness.judge.busy``: timed again).
"""

from __future__ import annotations

import os
import queue
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from harness.errors import UserError

VISIBLE = "CUDA_VISIBLE_DEVICES"


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` names them to a child: its own
    entries where it is set (indices, UUIDs or MIG names), else 0 to the count torch sees."""
    count = torch.cuda.device_count()
    listed = os.environ.get(VISIBLE)
    if listed is None:
        return [str(index) for index in range(count)]
    # CUDA ignores the entries after the first it cannot use: torch's count says how many held.
    return [name.strip() for name in listed.split(",") if name.strip()][:count]


def chosen_gpus(requested: int) -> list[str]:
    """The first ``requested`` visible GPUs (0: all of them)."""
    gpus = visible_gpus()
    if not gpus:
        raise UserError(
            "no CUDA GPU is visible to this process",
            where=f"{VISIBLE}={os.environ.get(VISIBLE, '(unset)')}",
            fix="run on a GPU machine, or use --device cpu",
        )
    if requested > len(gpus):
        raise UserError(
            f"{requested} GPUs asked for, {len(gpus)} visible ({', '.join(gpus)})",
            where=f"eval.gpus = {requested}",
            fix=f"ask for {len(gpus)} or fewer, or 0 for every visible GPU",
        )
    return gpus[: requested or len(gpus)]


class GpuPool:
    """GPUs lent to one evaluation at a time; ``lease`` waits for a free one."""

    def __init__(self, gpus: list[str]) -> None:
        self.gpus = list(gpus)
        self._free: queue.SimpleQueue[str] = queue.SimpleQueue()
        for gpu in self.gpus:
            self._free.put(gpu)

    def __len__(self) -> int:
        return len(self.gpus)

    @contextmanager
    def lease(self) -> Iterator[str]:
        gpu = self._free.get()
        try:
            yield gpu
        finally:
            self._free.put(gpu)


def environment(gpu: str | None) -> dict[str, str]:
    """What a worker's environment gains to see only ``gpu`` (None: nothing)."""
    return {} if gpu is None else {VISIBLE: gpu}
