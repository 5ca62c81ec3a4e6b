"""How a fused kernel's fast path can read each input: as ``rows x cols`` of the broadcast
output, split at a dimension ``m`` (``cols`` = the product of ``out[m:]``). Shared by the kernel
description (``agents.offline.kernel``) and the grouping, which keeps a row reduction only with
inputs that can be read a row at a time (split at the last dimension).
"""

from __future__ import annotations

import math


def read_layout(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[bool, frozenset[int] | None]:
    """How the fast path reads an input of ``shape`` broadcast to ``out``.

    Returns (contiguous columns, the splits that work; None: any split). At a split ``m`` the
    input's columns are ``out[m:]`` whole or broadcast, and the dimensions of ``out[:m]`` it
    indexes are one run (the host's ``kp::row_map``): a per-channel bias ``[C, 1, 1]`` of
    ``[N, C, H, W]`` reads one value per row at splits 2 and 3.
    """
    padded = (1,) * (len(out) - len(shape)) + shape
    if padded == out:
        return True, None
    if math.prod(padded) == 1:
        return False, None
    dims = range(1, len(out))
    inner = {m for m in dims if padded[m:] == out[m:] and _one_run(padded[:m], out[:m])}
    if inner:
        return True, frozenset(inner)
    outer = {m for m in dims if set(padded[m:]) == {1} and _one_run(padded[:m], out[:m])}
    return False, frozenset(outer)  # empty: only the general path can read it


def _one_run(rows: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """Whether the dimensions ``rows`` indexes (not broadcast, among ``out``'s of size over 1)
    are consecutive."""
    indexed = [size != 1 for size, whole in zip(rows, out, strict=True) if whole != 1]
    first = indexed.index(True) if True in indexed else len(indexed)
    return all(indexed[first : first + sum(indexed)])


def common_split(choices: list[frozenset[int] | None]) -> tuple[int | None, bool]:
    constraints = [choice for choice in choices if choice is not None]
    if not constraints:
        return None, True
    common = frozenset.intersection(*constraints)
    return (min(common), True) if common else (None, False)


def rows_readable(splits: list[frozenset[int] | None], rank: int) -> bool:
    """Whether inputs of these allowed splits can all be read a row (the last dimension) at a
    time: what a row reduction's kernel needs."""
    return all(choice is None or rank - 1 in choice for choice in splits)
