"""The extra cases' inputs, derived from a seed case's: other shapes (``resized_inputs``), a
wide range of values (``scaled_inputs``), other memory layouts (``strided_inputs``), and the
layout-keeping copies the workers stage inputs with (``copy_with_layout``).

Each is drawn from its seed alone, on the inputs' device, so every worker makes the same case
again without a copy of it travelling between them.
"""

from __future__ import annotations

import torch


def resized_inputs(inputs: list, variant: int, seed: int) -> list | None:
    """Inputs of another shape, drawn from the values of ``inputs`` (keeps their distribution).

    Variant 1 changes the leading (batch) dimension to a smaller size of the other parity,
    variant 2 the last one to a larger size by an odd amount (tails of vectorized loops). Both
    sizes are drawn from ``seed``: a kernel cannot be specialised to the variants' shapes
    either. None when the inputs have no such dimension to change.
    """
    tensors = [value for value in inputs if isinstance(value, torch.Tensor) and value.dim() > 0]
    if not tensors:
        return None
    axis = 0 if variant == 1 else -1
    old = tensors[0].shape[axis]
    if old == 0:  # no values along it to draw a longer one from
        return None
    generator = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> int:  # inclusive
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    if variant == 1:
        # Of the other parity than the original: a kernel (or a fallback) keyed on the size
        # being a multiple of 2, 8 or 64 cannot take the benchmark's path on this case.
        low = max(1, old // 4)
        new = 2 if old <= 1 else draw(low, old - 1)
        if (old - new) % 2 == 0:
            new = new - 1 if new - 1 >= low else new + 1
    else:
        new = old + 2 * draw(0, 7) + 1 if old > 1 else 0
    if new in (0, old):
        return None
    resized = []
    picker: torch.Generator | None = None
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[axis] == old:
            shape = list(value.shape)
            shape[axis] = new
            flat = value.flatten()
            # The picks are drawn on the tensor's device: for 10^9 elements a host draw
            # and its copy took seconds per case.
            if picker is None:
                picker = torch.Generator(flat.device).manual_seed(seed)
            value = _picked(flat, int(torch.Size(shape).numel()), picker).reshape(shape)
        resized.append(value)
    return resized


PICK_BLOCK = 256  # contiguous elements per random pick


def _picked(flat: torch.Tensor, count: int, picker: torch.Generator) -> torch.Tensor:
    """``count`` elements of ``flat`` drawn at random (with replacement) in runs of up to
    ``PICK_BLOCK`` neighbours, each run from a random start. One pick per element took an
    int64 index twice a float32 input's size beside it (16 GiB for KernelBench's 8 GiB
    inputs) and, on the device, a scattered read of every element; runs of 256 need an index
    1/128 of the input's size and read whole cache lines. A run is at most 1/64 of a small
    input, so its values still come from all over it (the first and last ``block - 1``
    elements are drawn less often: a run starts no later than ``block`` before the end)."""
    if count == 0:  # another dimension of size 0: nothing to draw
        return flat.new_empty(0)
    block = max(1, min(PICK_BLOCK, flat.numel() // 64))
    runs = flat.unfold(0, block, 1)  # row i: flat[i : i + block], a view
    picked = torch.empty(count, dtype=flat.dtype, device=flat.device)
    whole = count // block * block
    starts = torch.randint(
        runs.shape[0], (-(-count // block),), generator=picker, device=flat.device
    )
    torch.index_select(runs, 0, starts[: whole // block], out=picked[:whole].view(-1, block))
    if whole < count:
        picked[whole:] = runs[starts[-1]][: count - whole]
    return picked


def strided_inputs(inputs: list) -> list | None:
    """The same values in other memory layouts, as callers upstream hand them over (a
    transposed activation, a slice): tensors of 2+ dims stored with their last two dimensions
    swapped (column-major), 1-dim tensors as every other element of a buffer twice as long.

    A kernel that reads ``data_ptr()`` as if the input were contiguous reads the wrong
    elements, or the guard poison the candidate worker leaves in the gaps. None when no input
    is a tensor with more than one element.
    """
    laid_out, changed = [], False
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.numel() > 1:
            if value.dim() >= 2 and value.shape[-1] > 1 and value.shape[-2] > 1:
                value = value.transpose(-1, -2).contiguous().transpose(-1, -2)
            else:
                wide = torch.empty(
                    (*value.shape[:-1], 2 * value.shape[-1]),
                    dtype=value.dtype,
                    device=value.device,
                )
                value = wide[..., ::2].copy_(value)
            changed = True
        laid_out.append(value)
    return laid_out if changed else None


def copy_with_layout(
    tensor: torch.Tensor, device: str | torch.device, fill: float | int | bool = 0, margin: int = 0
) -> torch.Tensor:
    """A copy of ``tensor`` on ``device`` with the same strides, in a storage that holds
    ``fill`` in the gaps between elements and in ``margin`` elements before and after.

    ``.to(device)`` and ``.cpu()`` keep a transposed layout but make a gapped one (a slice with
    a step) contiguous. An expanded tensor (a stride of 0) becomes contiguous: its elements
    share memory, which no copy can write.
    """
    return layout_like(tensor, device, fill, margin).copy_(tensor)


def layout_like(
    tensor: torch.Tensor, device: str | torch.device, fill: float | int | bool, margin: int
) -> torch.Tensor:
    """An uninitialized-looking tensor laid out as ``copy_with_layout`` lays ``tensor`` out,
    holding ``fill`` everywhere."""
    expanded = any(s == 0 and n > 1 for s, n in zip(tensor.stride(), tensor.shape, strict=True))
    strides = torch.empty(tensor.shape, device="meta").stride() if expanded else tensor.stride()
    span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, strides, strict=True))
    storage = torch.full(
        (2 * margin + (span if tensor.numel() else 0),), fill, dtype=tensor.dtype, device=device
    )
    return storage.as_strided(tensor.shape, strides, margin)


def scaled_inputs(inputs: list, seed: int) -> list:
    """``inputs`` with float tensors scaled 4-16x (the factor drawn from ``seed``).

    randn's values lie within about +-4: a kernel whose approximation (a truncated series, a
    clamped table, a fast exp that overflows) holds only there passes every other case.
    """
    scale = wide_scale(seed)
    return [
        x * scale if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    ]


def wide_scale(seed: int) -> float:
    """The factor of the wide-range case, drawn from ``seed``: 4 to 16."""
    generator = torch.Generator().manual_seed(seed)
    return 4.0 + 12.0 * float(torch.rand((), generator=generator))
