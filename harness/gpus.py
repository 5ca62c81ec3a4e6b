"""The GPUs a run checks and times candidates on: one candidate at a time on each.

A candidate's checks worker and timing workers, the problem's comparator beside them and its
compiled baseline's worker see one GPU only, through ``CUDA_VISIBLE_DEVICES``: code that says
"cuda" runs there, and the CUDA IPC handles between a candidate's worker and the comparator
name the same device. Builds are the parent's and serve every GPU (GPUs of one kind: a build is
for the architecture of the first). The reference worker runs once per problem, on the first.

The variable names the GPU by its UUID, and the sandbox shows the worker that GPU's device node
alone (``device_minors``; every GPU's where the driver does not say which node is whose: MIG).
A limit (README, Limitations): while one GPU's candidate is timed, builds pause
(``harness.sandbox.quiet``) but the other GPUs' checks and comparators go on, which on a host
with few cores per GPU can make a timing window busy (``harness.judge.busy``: timed again).
"""

from __future__ import annotations

import functools
import logging
import os
import queue
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from harness.errors import UserError

VISIBLE = "CUDA_VISIBLE_DEVICES"
log = logging.getLogger(__name__)


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
    """What a worker's environment gains to see only ``gpu`` (None: nothing): its UUID where
    the driver lists it, which names it whatever else the worker sees (its sandbox shows it
    that GPU's device node only: ``device_minors``); else the name as it is."""
    return {} if gpu is None else {VISIBLE: _uuid_name(gpu)}


def _uuid_name(gpu: str) -> str:
    """``gpu`` (as ``visible_gpus`` names it: an index, a UUID, maybe shortened) by the UUID the
    driver lists it under, ``GPU-...``. A MIG instance (its UUID is not its GPU's), a name this
    process does not list, or a GPU the driver's records do not show stays as it is, and its
    workers see every GPU's device node: said once."""
    gpus = visible_gpus()
    if gpu.startswith("MIG-") or gpu not in gpus:
        return gpu
    uuid = str(torch.cuda.get_device_properties(gpus.index(gpu)).uuid).removeprefix("GPU-")
    if f"GPU-{uuid}" in _minors_by_uuid():
        return f"GPU-{uuid}"
    _unpinned(gpu)
    return gpu


@functools.cache
def _unpinned(gpu: str) -> None:
    log.warning(
        "GPU %s: the driver's records (%s) do not say which device node is its: its workers "
        "are shown every GPU's node, and only CUDA_VISIBLE_DEVICES keeps them on it",
        gpu, PROC_GPUS,
    )  # fmt: skip


def device_minors(visible: str | None) -> set[int] | None:
    """The minor numbers of the device nodes (``/dev/nvidiaN``) of the GPUs that ``visible``
    (a ``CUDA_VISIBLE_DEVICES`` value) names, as the driver lists them under ``PROC_GPUS``; None
    where that cannot be told: unset, indices (their order is CUDA's, not the driver's), MIG
    instances, or a UUID the driver does not list. Then every GPU's node is shown."""
    names = [name.strip() for name in (visible or "").split(",") if name.strip()]
    if not names or not all(name.startswith("GPU-") for name in names):
        return None
    minors = _minors_by_uuid()
    if not all(name in minors for name in names):
        return None
    return {minors[name] for name in names}


PROC_GPUS = Path("/proc/driver/nvidia/gpus")  # one folder per GPU, with its ``information``


def _minors_by_uuid() -> dict[str, int]:
    found = {}
    for information in PROC_GPUS.glob("*/information"):
        fields = {}
        try:
            text = information.read_text()
        except OSError:  # unreadable: that GPU is not known by its node
            continue
        for line in text.splitlines():
            name, _, value = line.partition(":")
            fields[name.strip()] = value.strip()
        uuid, minor = fields.get("GPU UUID", ""), fields.get("Device Minor", "")
        if uuid.startswith("GPU-") and minor.isdigit():
            found[uuid] = int(minor)
    return found
