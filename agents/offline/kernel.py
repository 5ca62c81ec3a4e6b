"""The backend-neutral description of one fused kernel, built from a group of fx nodes.

Both backends iterate over the broadcast output shape. The fast path sees it as ``rows x cols``
(``cols`` = the product of the dimensions from a split ``m`` on) and reads every input either as
a row of ``cols`` contiguous values or as one value per row, each input with its own row stride,
divisor and modulus (row ``r`` at ``((r / div) % mod) * stride``): this covers full tensors (also
row-strided views such as ``chunk`` halves), a ``[N]`` bias on ``[B, N]``, a ``[B, 1]`` column,
a per-channel ``[C, 1, 1]`` bias or scale on ``[N, C, H, W]``, a ``[C, H, W]`` residual on a
batch, and scalars. Any other broadcast or layout takes the general
path, which indexes every input with its broadcast strides.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch.fx import Node

from agents.offline.formulas import Arg, expression, float_literal
from agents.offline.grouping import group_outputs, iteration_shape
from agents.offline.ops import PointwiseOp


@dataclass(frozen=True)
class KernelInput:
    node: Node
    is_bool: bool
    contiguous_columns: bool  # fast path reads a row of it; otherwise one value per row


@dataclass(frozen=True)
class KernelOutput:
    node: Node
    is_bool: bool
    value: str  # the C++ variable holding it


@dataclass(frozen=True)
class FusedKernel:
    name: str
    inputs: tuple[KernelInput, ...]
    scalars: tuple[Node, ...]  # Python numbers computed by the graph, passed as double
    outputs: tuple[KernelOutput, ...]
    # (v<i>, C++ expression of inputs a<k> and scalars s<k>; it may use the dtype scalar_t)
    body: tuple[tuple[str, str], ...]
    split: int | None  # the traced broadcasts' row split; None: any (flat, else by last dim)
    fast_path: bool  # False when a traced input broadcasts in a way rows x cols cannot express
    kinds: tuple[str, ...]
    dtype: torch.dtype

    @property
    def has_bool(self) -> bool:
        return any(item.is_bool for item in self.inputs) or any(
            item.is_bool for item in self.outputs
        )


def build_kernel(
    name: str, group: list[Node], ops: dict[Node, PointwiseOp], dtype: torch.dtype
) -> FusedKernel:
    position = {node: index for index, node in enumerate(group)}
    tensors: list[Node] = []
    scalars: list[Node] = []

    def operand(value: object) -> Arg:
        if isinstance(value, Node):
            if value in position:
                return Arg(f"v{position[value]}")
            known = tensors if "tensor_meta" in value.meta else scalars
            if value not in known:
                known.append(value)
            if known is tensors:
                return Arg(f"a{known.index(value)}")
            return Arg(f"s{known.index(value)}", number=True)
        if value is None:
            return Arg(None)
        return Arg(float_literal(value), constant=float(value), number=True)  # type: ignore[arg-type]

    body = []
    for index, node in enumerate(group):
        op = ops[node]
        text = expression(op.kind, [operand(value) for value in op.operands])
        # Like PyTorch, round every result to the tensor dtype (free for float32): without it a
        # bfloat16 exp(x * 1.5) differs from eager by far more than bfloat16's own error.
        body.append((f"v{index}", text if _is_bool(node) else f"kp::rounded<scalar_t>({text})"))
    outputs = tuple(
        KernelOutput(node, _is_bool(node), f"v{position[node]}") for node in group_outputs(group)
    )
    shape = tuple(iteration_shape(group))
    layouts = [_layout(tuple(node.meta["tensor_meta"].shape), shape) for node in tensors]
    split, fast_path = _common_split([splits for _, splits in layouts])
    inputs = tuple(
        KernelInput(node, _is_bool(node), contiguous)
        for node, (contiguous, _) in zip(tensors, layouts, strict=True)
    )
    return FusedKernel(
        name=name,
        inputs=inputs,
        scalars=tuple(scalars),
        outputs=outputs,
        body=tuple(body),
        split=split,
        fast_path=fast_path,
        kinds=tuple(ops[node].kind for node in group),
        dtype=dtype,
    )


def row_invariant(kernel: FusedKernel) -> set[str]:
    """Variables that are the same along a row of the fast path: inputs read once per row,
    scalars, and values computed from those only (the CPU backend hoists them out of its loop)."""
    invariant = {f"a{k}" for k, item in enumerate(kernel.inputs) if not item.contiguous_columns}
    invariant |= {f"s{k}" for k in range(len(kernel.scalars))}
    for name, text in kernel.body:
        if set(_VARIABLE.findall(text)) <= invariant:
            invariant.add(name)
    return invariant


_VARIABLE = re.compile(r"\b[avs]\d+\b")


def _is_bool(node: Node) -> bool:
    return node.meta["tensor_meta"].dtype == torch.bool


def _layout(shape: tuple[int, ...], out: tuple[int, ...]) -> tuple[bool, frozenset[int] | None]:
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


def _common_split(choices: list[frozenset[int] | None]) -> tuple[int | None, bool]:
    constraints = [choice for choice in choices if choice is not None]
    if not constraints:
        return None, True
    common = frozenset.intersection(*constraints)
    return (min(common), True) if common else (None, False)
