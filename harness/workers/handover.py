"""How a candidate worker hands one case's outputs to the trusted side that compares them.

Two transports:

- ``file``: the outputs, copied to the host in their own layout, in ``outputs-<case>.pt`` in the
  job folder; the trusted side loads it as plain tensors (``weights_only``) and removes it.
- ``ipc`` (cuda): the outputs stay where the candidate wrote them; the announcement carries a
  CUDA IPC handle per output, and the trusted side maps the memory, copies it into memory of
  its own and lets go of the mapping at once. Nothing crosses the host: a 6.4 GB output costs
  a device-to-device copy, not a 6.4 GB file.

The announcement is untrusted (the candidate runs in the process that writes it), so
``receive`` reads only plain fields: numbers, a dtype name from a fixed list, base64 bytes. It
never unpickles, and ``set_`` checks the view against the size of the mapped storage.
"""

from __future__ import annotations

import base64
import binascii
from pathlib import Path
from typing import Literal

import torch

from harness.problem.variants import copy_with_layout
from harness.sandbox.jobs import outputs_file

Transport = Literal["file", "ipc"]

DTYPES = {
    str(dtype).removeprefix("torch."): dtype
    for dtype in (
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
    )
}


class HandoverError(Exception):
    """The announcement does not describe outputs the trusted side can read."""


def transport_for(device: str, recompute: bool, sandbox: str) -> Transport:
    """IPC where a comparator worker on the device compares, when workers are not sandboxed; a
    file where the parent does (it never opens a CUDA context), on cpu, and between sandboxes:
    CUDA IPC opens the exporting process's memory through its ``/proc`` entries, which a
    sandbox hides from every other (seen on an H200: "invalid device context" across PID
    namespaces, "mapping of buffer object failed" across user namespaces)."""
    return "ipc" if device == "cuda" and recompute and sandbox == "off" else "file"


def send(
    outputs: list[torch.Tensor], job_dir: Path, case: int, transport: Transport, keep: list
) -> dict:
    """Candidate side: make one case's outputs readable; returns the announcement's body.
    ``keep`` gets what must stay alive until the trusted side answered."""
    if transport == "file":
        cpu = [copy_with_layout(out.detach(), "cpu") for out in outputs]
        torch.save(cpu, job_dir / outputs_file(case))
        return {"case": case}
    # Blocks the candidate no longer holds go back to the driver first: the comparator
    # allocates beside this process (an honest kernel on a side stream left 72 GB cached).
    torch.cuda.empty_cache()
    return {"case": case, "ipc": [_share(out.detach(), keep) for out in outputs]}


def receive(body: dict, job_dir: Path, case: int, transport: Transport) -> list[torch.Tensor]:
    """Trusted side: the outputs the announcement ``body`` names, as tensors of our own, by the
    transport the trusted side chose (whatever the body claims)."""
    if transport == "ipc":
        handles = body.get("ipc")
        if not isinstance(handles, list):
            raise HandoverError("the announcement's 'ipc' field is not a list")
        return [_open(handle) for handle in handles]
    path = job_dir / outputs_file(case)
    if not path.is_file():
        raise HandoverError("the worker announced outputs it did not write")
    try:
        produced = torch.load(path, weights_only=True)
    finally:
        path.unlink(missing_ok=True)
    if not isinstance(produced, list) or not all(type(t) is torch.Tensor for t in produced):
        raise HandoverError("the outputs file holds no list of tensors")
    return produced


def _share(tensor: torch.Tensor, keep: list) -> dict:
    if tensor.device.type != "cuda":
        raise HandoverError(f"an output is on {tensor.device}, not on the cuda device")
    try:
        shared = tensor.untyped_storage()._share_cuda_()
    except RuntimeError:
        # Memory PyTorch's allocator did not hand out (a kernel's own cudaMalloc wrapped with
        # from_blob) has no IPC handle of its own: a copy of the values goes instead.
        tensor = tensor.clone()
        keep.append(tensor)
        shared = tensor.untyped_storage()._share_cuda_()
    (
        device,
        handle,
        size_bytes,
        offset_bytes,
        counter_handle,
        counter_offset,
        event_handle,
        event_sync_required,
    ) = shared
    return {
        "dtype": str(tensor.dtype).removeprefix("torch."),
        "shape": list(tensor.shape),
        "stride": list(tensor.stride()),
        "offset": tensor.storage_offset(),
        "device": device,
        "handle": _b64(handle),
        "size_bytes": size_bytes,
        "offset_bytes": offset_bytes,
        "counter_handle": _b64(counter_handle),
        "counter_offset": counter_offset,
        "event_handle": _b64(event_handle),
        "event_sync_required": bool(event_sync_required),
    }


def _open(handle: object) -> torch.Tensor:
    """Map one shared output, copy it (dense, same shape) into our own memory, unmap it."""
    if not isinstance(handle, dict):
        raise HandoverError("an IPC handle is not an object")
    dtype = DTYPES.get(str(handle.get("dtype")))
    if dtype is None:
        raise HandoverError(f"an output has dtype {handle.get('dtype')!r}")
    shape, stride = _ints(handle, "shape"), _ints(handle, "stride")
    offset, size_bytes = _int(handle, "offset"), _int(handle, "size_bytes")
    if len(shape) != len(stride) or any(n < 0 for n in shape) or any(s < 0 for s in stride):
        raise HandoverError(f"an output's shape {shape} and strides {stride} do not match")
    if size_bytes == 0 or 0 in shape:
        return torch.empty(shape, dtype=dtype, device="cuda")
    device = _int(handle, "device")
    shared = (
        device,
        _bytes(handle, "handle"),
        size_bytes,
        _int(handle, "offset_bytes"),
        _bytes(handle, "counter_handle"),
        _int(handle, "counter_offset"),
        _bytes(handle, "event_handle"),
        bool(handle.get("event_sync_required")),
    )
    if device != torch.cuda.current_device():
        raise HandoverError(f"an output is on cuda:{device}, the problem on another device")
    try:
        storage = torch.UntypedStorage._new_shared_cuda(*shared)
        # set_ checks that the view fits the mapped storage.
        view = torch.empty(0, dtype=dtype, device="cuda").set_(storage, offset, shape, stride)
        own = view.clone(memory_format=torch.contiguous_format)
    except (RuntimeError, TypeError, ValueError) as err:
        raise HandoverError(f"the output's CUDA memory could not be mapped: {err}") from err
    del view, storage  # the mapping goes; the copy is ours
    return own


def _int(handle: dict, key: str) -> int:
    value = handle.get(key)
    if type(value) is not int:
        raise HandoverError(f"an IPC handle's {key!r} is not an integer")
    return value


def _ints(handle: dict, key: str) -> list[int]:
    values = handle.get(key)
    if not isinstance(values, list) or not all(type(v) is int for v in values) or len(values) > 16:
        raise HandoverError(f"an IPC handle's {key!r} is not a list of integers")
    return values


def _bytes(handle: dict, key: str) -> bytes:
    value = handle.get(key)
    if not isinstance(value, str) or len(value) > 4096:
        raise HandoverError(f"an IPC handle's {key!r} is not a short base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error as err:
        raise HandoverError(f"an IPC handle's {key!r} is not base64") from err


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()
