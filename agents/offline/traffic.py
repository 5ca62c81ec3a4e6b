"""How much of the memory eager PyTorch moves for a module the fused kernels would save.

A chain fused after a large library call can be worth nothing: KernelBench level2
25_Conv2d_Min_Tanh_Tanh's two ``tanh`` run on the one channel its ``min`` leaves of the
convolution's 128, and fusing them saved 15 of the module's 5730 µs of device time; in call time
the candidate measured 0.94x eager (H200, bench/BENCHMARKS.md section 7). A gain that small is
below what one evaluation's timing can tell apart, so the candidate could only lose, or win by
chance.

Eager's traffic is estimated per call of the traced graph: each call reads its tensor arguments
(and a layer's own parameters and buffers) and writes its result; views and shape queries move
nothing. A fused group reads its inputs and writes its outputs once. This undercounts what
compute-bound calls (a convolution, a matmul) cost next to a pass over memory, so the share it
gives is the most the kernels could gain: offered only where that is at least
``MIN_SAVED_SHARE``.
"""

from __future__ import annotations

import operator

import torch
from torch import nn
from torch.fx import GraphModule, Node

from agents.offline.grouping import group_outputs

# The least share of eager's memory traffic the kernels must save to be offered: the spread of
# one evaluation's timing on a quiet machine is a few percent (bench/BENCHMARKS.md section 19).
MIN_SAVED_SHARE = 0.05

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


def saved_share(graph_module: GraphModule, groups: list[list[Node]]) -> float:
    """The share of eager's traffic for one call that the groups, fused, would not move."""
    modules = dict(graph_module.named_modules())
    total = sum(eager_bytes(node, modules) for node in graph_module.graph.nodes)
    if total == 0:
        return 0.0
    saved = 0
    for group in groups:
        inside = set(group)
        inputs = {value for node in group for value in node.all_input_nodes if value not in inside}
        fused = sum(map(tensor_bytes, inputs)) + sum(map(tensor_bytes, group_outputs(group)))
        saved += sum(eager_bytes(node, modules) for node in group) - fused
    return max(saved, 0) / total
