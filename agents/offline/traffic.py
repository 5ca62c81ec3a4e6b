"""How much of eager PyTorch's time for a module the fused kernels would save, estimated.

A chain fused after a large library call can be worth nothing: KernelBench level2
25_Conv2d_Min_Tanh_Tanh's two ``tanh`` run on the one channel its ``min`` leaves of the
convolution's 128, and fusing them saved 15 of the module's 5730 µs of device time; in call time
the candidate measured 0.94x eager (H200, bench/BENCHMARKS.md section 7). A gain that small is
below what one evaluation's timing can tell apart, so the candidate could only lose, or win by
chance.

Eager's cost is estimated per call of the traced graph, in bytes of memory traffic: each call
reads its tensor arguments (and a layer's own parameters and buffers) and writes its result;
views and shape queries move nothing. A matmul or a convolution costs the larger of what it
moves and its floating-point operations over the device's balance (``BALANCE``: the operations
it does in the time it moves one byte), since those are bound by compute: KernelBench level2
9_Matmul_Subtract_Multiply_ReLU moves 0.5 GB but computes for 2.7 ms, and its fused epilogue,
saving 29 µs, measured 1.00x eager. A fused group reads its inputs and writes its outputs once.
On cuda a 2-d convolution also costs eager cuDNN's two layout conversions (a pass over its
input, one over its output: ``conv_layout.eager_conversion_bytes``); where the candidate runs
it channels-last, its own transpose of the input is one pass and its epilogue writes NCHW in
the pass it makes anyway, so it saves the output's conversion (``conv_layout``).
The candidate is offered only where the groups save at least ``MIN_SAVED_SHARE`` of the whole.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import GraphModule, Node

from agents.offline import conv_layout
from agents.offline.grouping import group_outputs
from agents.offline.ops import ROW_KINDS, SOFTMAX_KINDS, PointwiseOp

# The least share of eager's estimated cost the kernels must save to be offered: the spread of
# one evaluation's timing on a quiet machine is a few percent (bench/BENCHMARKS.md section 19).
MIN_SAVED_SHARE = 0.05

# Floating-point operations per byte moved at which a call's compute takes as long as its
# memory traffic, by the device's kind and the call's: on an H100/H200, fp32 matmuls run
# without TF32 (PyTorch's default) at ~60 TFLOP/s against 3.4-4.8 TB/s, convolutions through
# cuDNN with TF32 (its default) at ~400; 16-bit values on tensor cores at ~800. CPUs: ~1-2
# TFLOP/s of fp32 against ~100 GB/s. Rounded down: a call counted as more compute-bound than it
# is only makes a candidate less likely to be offered.
BALANCE = {
    ("cuda", "matmul", 4): 12.0,
    ("cuda", "conv", 4): 80.0,
    ("cuda", "matmul", 2): 150.0,
    ("cuda", "conv", 2): 150.0,
    ("cpu", "matmul", 4): 10.0,
    ("cpu", "conv", 4): 10.0,
    ("cpu", "matmul", 2): 10.0,
    ("cpu", "conv", 2): 10.0,
}

LINEAR_FUNCTIONS = frozenset(
    {F.linear, torch.matmul, operator.matmul, torch.mm, torch.bmm, torch.addmm, torch.baddbmm}
)
LINEAR_METHODS = frozenset({"matmul", "mm", "bmm", "__matmul__", "addmm", "baddbmm"})
CONV_FUNCTIONS = frozenset({F.conv1d, F.conv2d, F.conv3d})
TRANSPOSED_CONV_FUNCTIONS = frozenset({F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d})

# Reads of each row by eager's softmax over long rows: its maximum, the sum of exponentials, the
# result (PyTorch's row-per-block kernel, the rows too long to keep).
EAGER_SOFTMAX_READS = 3

# Calls that give a view of their argument, or a shape: no pass over memory.
VIEW_METHODS = frozenset(
    {
        "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze",
        "unsqueeze", "permute", "transpose", "t", "expand", "expand_as", "narrow", "select",
        "split", "chunk", "unbind", "contiguous", "size", "dim", "detach", "unfold",
    }
)  # fmt: skip
VIEW_FUNCTIONS = frozenset(
    {
        torch.reshape, torch.flatten, torch.squeeze, torch.unsqueeze, torch.permute,
        torch.transpose, torch.t, torch.narrow, torch.select, torch.split, torch.chunk,
        torch.unbind, torch.detach, operator.getitem, getattr,
    }
)  # fmt: skip


def tensor_bytes(node: Node) -> int:
    """Bytes of the tensor (or tensors) ``node`` gives, from its propagated shape."""
    return _meta_bytes(node.meta.get("tensor_meta"))


def _meta_bytes(meta: object) -> int:
    shape, dtype = getattr(meta, "shape", None), getattr(meta, "dtype", None)
    if isinstance(shape, torch.Size) and isinstance(dtype, torch.dtype):
        return shape.numel() * dtype.itemsize
    if isinstance(meta, list | tuple):  # several tensors (TensorMetadata itself is a tuple)
        return sum(_meta_bytes(item) for item in meta)
    return 0


def _shape(value: object) -> torch.Size | None:
    meta = value.meta.get("tensor_meta") if isinstance(value, Node) else None
    shape = getattr(meta, "shape", None)
    return shape if isinstance(shape, torch.Size) else None


def flops(node: Node, modules: dict[str, nn.Module]) -> tuple[str, float] | None:
    """("matmul" or "conv", floating-point operations) of a matmul's or a convolution's call,
    from the traced shapes; None for any other call."""
    out = _shape(node)
    if out is None:
        return None
    tensors = [shape for shape in map(_shape, node.args) if shape is not None]
    if node.op == "call_module":
        layer = modules[str(node.target)]
        if isinstance(layer, nn.Linear):
            return "matmul", 2.0 * out.numel() * layer.in_features
        if isinstance(layer, nn.modules.conv._ConvTransposeNd) and tensors:
            per_input = layer.out_channels // layer.groups * math.prod(layer.kernel_size)
            return "conv", 2.0 * tensors[0].numel() * per_input
        if isinstance(layer, nn.modules.conv._ConvNd):
            per_output = layer.in_channels // layer.groups * math.prod(layer.kernel_size)
            return "conv", 2.0 * out.numel() * per_output
        return None
    linear = (node.op == "call_function" and node.target in LINEAR_FUNCTIONS) or (
        node.op == "call_method" and node.target in LINEAR_METHODS
    )
    if linear and tensors:
        # addmm(bias, a, b), baddbmm(bias, a, b): the product's left operand is the second
        name = getattr(node.target, "__name__", str(node.target))
        left = tensors[1] if name in ("addmm", "baddbmm") and len(tensors) > 2 else tensors[0]
        return "matmul", 2.0 * out.numel() * (left[-1] if left else 1)
    if node.op == "call_function" and len(tensors) > 1:
        weight = tensors[1]
        if node.target in CONV_FUNCTIONS:
            return "conv", 2.0 * out.numel() * math.prod(weight[1:])
        if node.target in TRANSPOSED_CONV_FUNCTIONS:
            return "conv", 2.0 * tensors[0].numel() * math.prod(weight[1:])
    return None


def eager_cost(node: Node, modules: dict[str, nn.Module], device: str) -> float:
    """Eager's cost for ``node``'s call in bytes: what it moves, or its compute where that
    takes longer (``BALANCE``)."""
    moved = eager_bytes(node, modules)
    work = flops(node, modules)
    if work is None:
        return float(moved)
    meta = node.meta.get("tensor_meta")
    size = 2 if getattr(meta, "dtype", None) in (torch.float16, torch.bfloat16) else 4
    kind, operations = work
    machine = "cuda" if device.startswith("cuda") else "cpu"
    return max(float(moved), operations / BALANCE[(machine, kind, size)])


def eager_bytes(node: Node, modules: dict[str, nn.Module]) -> int:
    """What eager reads and writes for ``node``'s call."""
    if node.op == "call_method" and node.target in VIEW_METHODS:
        return 0
    if node.op == "call_function" and node.target in VIEW_FUNCTIONS:
        return 0
    if node.op not in ("call_function", "call_method", "call_module"):
        return 0  # inputs, attributes, the output: read where a call reads them
    moved = tensor_bytes(node) + sum(tensor_bytes(value) for value in node.all_input_nodes)
    if node.op == "call_module":
        layer = modules[str(node.target)]
        moved += sum(t.numel() * t.element_size() for t in (*layer.parameters(), *layer.buffers()))
    return moved


def saved_share(
    graph_module: GraphModule,
    groups: list[list[Node]],
    ops: dict[Node, PointwiseOp],
    device: str,
    channels_last: frozenset[Node] = frozenset(),
) -> float:
    """The share of eager's cost for one call (``eager_cost``) that the groups, fused, save,
    and running the convolutions ``channels_last`` so (``agents.offline.conv_layout``).

    Row reductions (``ops.ROW_KINDS``) make passes of their own: eager's softmax over rows as
    long as the proposer fuses (``rows.ROW_MIN_WIDTH``) reads each row ``EAGER_SOFTMAX_READS``
    times, and the row kernel reads its row twice (the row's statistics, then the ops after
    them)."""
    modules = dict(graph_module.named_modules())

    eager = {
        node: eager_cost(node, modules, device)
        + conv_layout.eager_conversion_bytes(node, modules, device)
        for node in graph_module.graph.nodes
    }
    for node, op in ops.items():
        if op.kind in SOFTMAX_KINDS:
            eager[node] += (EAGER_SOFTMAX_READS - 1) * tensor_bytes(node)
    total = sum(eager.values())
    if total == 0:
        return 0.0
    saved = 0.0
    for group in groups:
        inside = set(group)
        inputs = {value for node in group for value in node.all_input_nodes if value not in inside}
        fused = sum(map(tensor_bytes, inputs)) + sum(map(tensor_bytes, group_outputs(group)))
        for node in group:
            source = ops[node].operands[0]
            if ops[node].kind in ROW_KINDS and isinstance(source, Node):
                fused += tensor_bytes(source)
        saved += sum(eager[node] for node in group) - fused
    for conv in channels_last:  # cuDNN's conversions, against the candidate's own transpose
        saved += conv_layout.eager_conversion_bytes(conv, modules, device)
        saved -= conv_layout.transpose_bytes(conv)
    return max(saved, 0.0) / total
