"""The backend-neutral description of one fused kernel, built from a group of fx nodes.

Both backends iterate over the broadcast output shape. The fast path sees it as ``rows x cols``
(``cols`` = the product of the dimensions from a split ``m`` on) and reads every input either as
a row of ``cols`` contiguous values or as one value per row, each input with its own row stride,
divisor and modulus (row ``r`` at ``((r / div) % mod) * stride``): this covers full tensors (also
row-strided views such as ``chunk`` halves), a ``[N]`` bias on ``[B, N]``, a ``[B, 1]`` column,
a per-channel ``[C, 1, 1]`` bias or scale on ``[N, C, H, W]``, a ``[C, H, W]`` residual on a
batch, and scalars. Any other broadcast or layout takes the general
path, which indexes every input with its broadcast strides.

A group may hold one row reduction over the last dimension (softmax, log-softmax, or a row's
sum, mean or 2-norm kept as a dimension of 1: ``RowReduction``): its kernel reads rows, split at
the last dimension, and computes the group's ops before the reduction (per element), the
reduction over the row, then the ops after it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch.fx import Node

from agents.offline.formulas import Arg, expression, float_literal
from agents.offline.grouping import group_outputs, iteration_shape
from agents.offline.layout import common_split, read_layout
from agents.offline.ops import ROW_KINDS, PointwiseOp


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
class RowReduction:
    """A reduction over each row of the group's iteration shape (its last dimension): the
    body's ``value`` is the reduction of the body's ``source``, and the body names the reduced
    value ``ROW_VALUE``."""

    kind: str
    node: Node
    value: str
    source: str


ROW_VALUE = "row_value"  # the C++ name of a row reduction's result for the current element


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
    row: RowReduction | None = None
    # The input read channels-last (a convolution's NHWC output), from which the kernel also
    # has a tiled path writing its output NCHW (agents.offline.conv_layout); None: none.
    nhwc_input: int | None = None

    @property
    def has_bool(self) -> bool:
        return any(item.is_bool for item in self.inputs) or any(
            item.is_bool for item in self.outputs
        )


def build_kernel(
    name: str,
    group: list[Node],
    ops: dict[Node, PointwiseOp],
    dtype: torch.dtype,
    nhwc: Node | None = None,
) -> FusedKernel:
    """``nhwc``: the input the kernel reads channels-last (``FusedKernel.nhwc_input``)."""
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
    row = None
    for index, node in enumerate(group):
        op = ops[node]
        if op.kind in ROW_KINDS:
            source = operand(op.operands[0]).expr
            row = RowReduction(op.kind, node, f"v{index}", str(source))
            body.append((f"v{index}", f"kp::rounded<scalar_t>({ROW_VALUE})"))
            continue
        text = expression(op.kind, [operand(value) for value in op.operands])
        # Like PyTorch, round every result to the tensor dtype (free for float32): without it a
        # bfloat16 exp(x * 1.5) differs from eager by far more than bfloat16's own error.
        body.append((f"v{index}", text if _is_bool(node) else f"kp::rounded<scalar_t>({text})"))
    outputs = tuple(
        KernelOutput(node, _is_bool(node), f"v{position[node]}") for node in group_outputs(group)
    )
    shape = tuple(iteration_shape(group))
    layouts = [read_layout(tuple(node.meta["tensor_meta"].shape), shape) for node in tensors]
    split, fast_path = common_split([splits for _, splits in layouts])
    if row is not None:  # rows: the last dimension as called (kp::last_split); fusion_groups
        # kept only inputs the traced shapes let it read so, and the wrapper copies the others
        split, fast_path = None, True
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
        row=row,
        nhwc_input=None if nhwc is None else tensors.index(nhwc),
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
