"""Dynamic defences used inside the candidate worker.

Guard regions around inputs, poisoned memory, output fingerprints, and snapshots of what a
cheat would patch: functions, global hooks, dispatcher entries, settings, the harness itself.
"""

from __future__ import annotations

import builtins
import inspect
import os
import resource
import time
from collections.abc import Callable

import torch

from harness.judge.precision import float32_settings
from harness.judge.tolerance import CHUNK
from harness.problem.variants import copy_with_layout, layout_like

GUARD_ELEMENTS = 1024


def guarded(tensor: torch.Tensor, device: str | torch.device | None = None) -> torch.Tensor:
    """A copy of ``tensor`` (on ``device``, by default its own) in the same layout, with poison
    before and after it, and in any gaps its strides leave, in the same storage.

    A kernel that reads past either end of its input, or reads a strided input as if it were
    contiguous, reads NaN (floats) or huge values.
    """
    target = tensor.device if device is None else device
    return copy_with_layout(tensor, target, guard_fill(tensor), GUARD_ELEMENTS)


def poisoned_like(tensor: torch.Tensor) -> torch.Tensor:
    """A tensor laid out as ``guarded(tensor)`` is, holding poison everywhere (its values are
    copied in later, asynchronously)."""
    return layout_like(tensor, tensor.device, guard_fill(tensor), GUARD_ELEMENTS)


def guard_fill(tensor: torch.Tensor) -> float | int | bool:
    if tensor.is_floating_point():
        return float("nan")
    if tensor.dtype == torch.bool:
        return True
    return int(torch.iinfo(tensor.dtype).max)


def poison_memory(
    shapes: list[tuple[list[int], str]], device: str, fill: float = float("nan")
) -> None:
    """Leave ``fill`` (NaN by default) in freed memory of the outputs' sizes: unwritten output
    elements show up."""
    for shape, dtype_name in shapes:
        dtype = getattr(torch, dtype_name)
        if dtype.is_floating_point:
            block = torch.full(shape, fill, dtype=dtype, device=device)
            del block


SAMPLE_ELEMENTS = 1 << 16
Outputs = list[torch.Tensor] | tuple[torch.Tensor, ...]


def sample(outputs: Outputs) -> list[torch.Tensor]:
    """Up to ``SAMPLE_ELEMENTS`` elements of each output, spread evenly over all of it (the
    last element included), gathered on its device without synchronizing.

    Taken first thing after forward returns, on the current stream. Work that forward left
    running on a stream the current stream does not wait for is still writing the outputs
    then, and a gather this small (microseconds) reads them long before that work is done,
    in whatever order it writes. A full-size read (a copy, a sum) takes as long as the work
    it races and trails it element by element: it sees finished values, and so cannot tell.
    """
    taken = []
    for out in outputs:
        count = out.numel()
        step = max(1, -(-count // SAMPLE_ELEMENTS))
        index = torch.arange(count - 1, -1, -step, device=out.device)
        taken.append(torch.take(out.detach(), index))
    return taken


def fingerprint(outputs: Outputs) -> list[tuple[float, float]]:
    """Summary of every element of the outputs; taken at return and again after
    synchronization (after ``sample``, which must not wait for it)."""
    return read_sums(fingerprint_sums(outputs))


def fingerprint_sums(outputs: Outputs) -> list[torch.Tensor]:
    """The fingerprint's sums, queued on the current stream and not read yet.

    Summed in float64 a chunk at a time: a whole-output float64 copy and its absolute value
    took four times the output's memory beside it (an 8 GiB float32 output of a KernelBench
    problem ran the checks' worker out of an H100's memory), and a chunk's copies take a
    fixed amount. The same chunks in the same order both times: equal outputs give equal sums.
    """
    queued = []
    for out in outputs:
        flat = out.detach().reshape(-1)
        sums = torch.zeros(2, dtype=torch.float64, device=flat.device)
        step = CHUNK.get(flat.device.type, CHUNK["cpu"])
        for start in range(0, flat.numel(), step):
            part = flat[start : start + step].double()
            sums[0] += part.nansum()
            sums[1] += part.abs().nansum()
        queued.append(sums)
    return queued


def read_sums(queued: list[torch.Tensor]) -> list[tuple[float, float]]:
    prints = []
    for sums in queued:
        total, magnitude = sums.tolist()
        prints.append((total, magnitude))
    return prints


AtReturn = tuple[list[torch.Tensor], list[tuple[float, float]]]


def at_return(outputs: Outputs, before_read: Callable[[], None] | None = None) -> AtReturn:
    """What the outputs hold when forward returns: the sample first (a full-size read before
    it would give deferred work time to finish), then the sums of every element, both queued
    on the current stream before anything waits for them; ``before_read()`` runs between
    queuing them and the wait (the stream gate's release, ``harness.workers.stream_hold``)."""
    sampled = sample(outputs)
    queued = fingerprint_sums(outputs)
    if before_read is not None:
        before_read()
    return sampled, read_sums(queued)


def changed_since(taken: AtReturn, outputs: Outputs) -> bool:
    """Do the outputs, now (after ``settle``), hold other values than ``at_return`` saw?"""
    sampled, sums = taken
    return fingerprint(outputs) != sums or not samples_unchanged(sampled, outputs)


def samples_unchanged(before: list[torch.Tensor], outputs: Outputs) -> bool:
    """The outputs still hold what ``sample`` read from them (NaN matches NaN)."""
    return all(equal_nan(now, then) for now, then in zip(sample(outputs), before, strict=True))


def equal_nan(now: torch.Tensor, then: torch.Tensor) -> bool:
    """Same shape and values, NaN matching NaN."""
    if now.shape != then.shape:
        return False
    if torch.equal(now, then):
        return True
    if not (now.is_floating_point() or now.is_complex()):
        return False
    return bool(((now == then) | (now.isnan() & then.isnan())).all())


def settle(device: str) -> None:
    """Wait for every stream and give stray host threads a moment to show themselves."""
    if device == "cuda":
        torch.cuda.synchronize()
    time.sleep(0.02)


def same_values(now: torch.Tensor, then: torch.Tensor) -> bool:
    """``now`` holds what ``then`` holds (NaN matches NaN), and its guard regions are intact."""
    if not equal_nan(now, then):
        return False
    storage = now.untyped_storage()
    if storage.nbytes() != (now.numel() + 2 * GUARD_ELEMENTS) * now.element_size():
        return True  # not a guarded tensor
    raw = torch.tensor([], dtype=now.dtype, device=now.device).set_(storage)
    head, tail = raw[:GUARD_ELEMENTS], raw[GUARD_ELEMENTS + now.numel() :]
    for region in (head, tail):  # out-of-bounds writes land in the guard regions
        intact = region.isnan() if now.is_floating_point() else region == guard_fill(now)
        if not bool(intact.all()):
            return False
    return True


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Do the two tensors share any storage bytes?"""
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    a_store, b_store = a.untyped_storage(), b.untyped_storage()
    a_start, b_start = a_store.data_ptr(), b_store.data_ptr()
    return a_start < b_start + b_store.nbytes() and b_start < a_start + a_store.nbytes()


# --- snapshots of what a cheat would patch ------------------------------------------------------


_DESCRIPTORS = (staticmethod, classmethod, property)


def snapshot(ops: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """Identity of every function, hook and setting a timing or comparison could be fooled
    through; ``ops`` (the reference's aten ops) get their dispatcher entries recorded too."""
    import torch._dynamo  # noqa: F401  (importing it rewraps torch.manual_seed: do it first)
    import torch.nn.functional as functional

    owners: dict[str, object] = {
        "torch": torch,
        "torch.nn.functional": functional,
        "torch.Tensor": torch.Tensor,
        "torch.nn.Module": torch.nn.Module,
        "time": time,
        "resource": resource,  # the timer's count of preempted calls
        "os": os,  # ... and its reading of the threads' scheduler statistics
        "builtins": builtins,
        "torch.profiler": torch.profiler,
        "torch.testing": torch.testing,
    }
    if torch.cuda.is_available():
        torch.cuda.init()  # lazy initialization rewrites torch.cuda state: do it before looking
        owners.update({"torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event})
    marks = {}
    for owner_name, owner in owners.items():
        for name in dir(owner):
            if name in ("__dict__", "__doc__", "__weakref__", "__module__", "__annotations__"):
                continue
            # Static lookup: inherited entries count (Tensor.__eq__ lives on TensorBase, and a
            # cheat would shadow it on Tensor), no descriptor or lazy module import runs.
            value = inspect.getattr_static(owner, name, None)
            # Private flags (torch.cuda._initialized, ...) are state that changes on its own;
            # public flags and every function are what a cheat would flip or swap.
            if isinstance(value, bool):
                if not name.startswith("_"):
                    marks[f"{owner_name}.{name}"] = int(value)
            elif value is not None and (callable(value) or isinstance(value, _DESCRIPTORS)):
                marks[f"{owner_name}.{name}"] = id(value)
    marks.update(_settings())
    marks.update(_global_hooks())
    marks.update(_dispatcher(ops))
    marks.update(_harness_marks())
    return marks


def _global_hooks() -> dict[str, int]:
    """nn.Module's process-wide hooks: one runs inside every module's call, the baselines too."""
    from torch.nn.modules import module

    marks = {}
    for name, value in vars(module).items():
        if name.startswith("_global_") and isinstance(value, dict):
            marks[f"torch.nn.modules.module.{name}"] = hash(tuple(map(id, value.values())))
    return marks


def _dispatcher(ops: list[str] | tuple[str, ...]) -> dict[str, int]:
    """Every aten operator's dispatcher entries: an overridden kernel changes its entry.

    Dumping them all takes about 0.1 s; the reference's own ops are also named one by one.
    """
    names = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")]
    marks = {"torch dispatcher (aten)": hash(tuple(torch._C._dispatch_dump(n) for n in names))}
    for op in ops:
        name = f"aten::{op}"
        if name in names:
            marks[f"dispatcher {name}"] = hash(torch._C._dispatch_dump(name))
    return marks


def _harness_marks() -> dict[str, int]:
    """The harness's own functions and tables, which run in the candidate's process too."""
    import sys

    marks = {}
    for module_name, module in list(sys.modules.items()):
        if not module_name.startswith("harness.") or module is None:
            continue
        for name, value in list(vars(module).items()):
            if name.startswith("__"):
                continue
            if callable(value) or inspect.ismodule(value):
                marks[f"{module_name}.{name}"] = id(value)
            elif isinstance(value, dict | list | set | tuple | str | int | float):
                marks[f"{module_name}.{name}"] = hash(repr(value))
    return marks


def _settings() -> dict[str, int]:
    """Global settings that change how fast the baselines run or how precise they are."""
    settings = {
        "torch.get_num_threads()": torch.get_num_threads(),
        "torch.get_num_interop_threads()": torch.get_num_interop_threads(),
        **{name: hash(value) for name, value in float32_settings().items()},
        "torch.backends.cudnn.benchmark": int(torch.backends.cudnn.benchmark),
        "torch.backends.mkldnn.enabled": int(bool(torch.backends.mkldnn.enabled)),
        "torch.are_deterministic_algorithms_enabled()": int(
            torch.are_deterministic_algorithms_enabled()
        ),
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": int(
            torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction
        ),
        "torch.is_grad_enabled()": int(torch.is_grad_enabled()),
        "torch function modes": torch._C._len_torch_function_stack(),
        "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
    }
    return settings


def changed(before: dict[str, int], after: dict[str, int]) -> list[str]:
    """Names whose function or setting differs, and names that appeared or disappeared."""
    return sorted(
        name for name in before.keys() | after.keys() if before.get(name) != after.get(name)
    )
