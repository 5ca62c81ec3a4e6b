"""Which nodes of a traced graph a generated kernel may compute, and what writes in place.

A pointwise op of the problem's dtype (or bool) is fusable unless it reads a value that PyTorch
still writes in place; an in-place op on a fresh intermediate is made out of place first. The
same analysis tells the guards (``agents.offline.guards``) which PyTorch calls write into memory
that outlives the call: a guard that falls back to the original forward after one would run it
twice.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn as nn
from torch.fx import GraphModule, Node

from agents.offline.constants import inlined
from agents.offline.module_ops import module_op
from agents.offline.ops import ROW_KINDS, PointwiseOp, function_op, method_op

DROPOUT_MODULES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_FRESH_FUNCTIONS = {
    "linear",
    "matmul",
    "mm",
    "bmm",
    "addmm",
    "baddbmm",
    "einsum",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "softmax",
    "log_softmax",
    "layer_norm",
    "group_norm",
    "batch_norm",
    "instance_norm",
    "rms_norm",
    "cat",
    "stack",
    "sum",
    "mean",
    "clone",
    "embedding",
    "interpolate",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "pad",
    "cumsum",
    "scaled_dot_product_attention",
}
_VIEW_MODULES = (nn.Flatten, nn.Unflatten, nn.Identity, *DROPOUT_MODULES)


def fusable_ops(
    graph_module: GraphModule, dtype: torch.dtype, row_min_widths: Mapping[str, int] | None = None
) -> tuple[dict[Node, PointwiseOp], list[str]]:
    """The pointwise nodes a kernel may compute, and the names of those it may not.
    ``row_min_widths``: row reductions (``ops.ROW_KINDS``) over rows at least this wide for
    their kind are computed too (row kernels); None: none are."""
    modules = dict(graph_module.named_modules())
    order = {node: index for index, node in enumerate(graph_module.graph.nodes)}
    ops: dict[Node, PointwiseOp] = {}
    recognised: list[Node] = []
    for node in graph_module.graph.nodes:
        op = _recognise(node, modules)
        if op is not None:
            op = inlined(op)  # a 0-dim constant the trace made: its number
            if not any(
                isinstance(value, Node) and "tensor_meta" in value.meta for value in op.operands
            ):
                op = None  # numbers alone, no tensor: not a kernel's work
        if op is not None and op.kind in ROW_KINDS and not _wide_enough(op, row_min_widths):
            op = None  # a PyTorch call, as any op not recognised
        if op is not None:
            recognised.append(node)
        if op is None or not _types_ok(node, op, dtype):
            continue
        if op.inplace and not _functionalize(node, op.operands[0], order, ops, modules):
            continue
        ops[node] = op
    # A value that PyTorch still writes in place (an input, a view, or anything sharing memory
    # with those) changes under a kernel that reads it at one point in time: ops reading one
    # stay PyTorch calls, in their place.
    mutated = mutated_values(graph_module, ops, modules)
    for node in [node for node, op in ops.items() if mutated & set(op.operands)]:
        del ops[node]
    # Unread pointwise results (in-place ones too, once private) would be kernels without
    # outputs. torch.fx's own dead-code pass is not used: it also drops in-place ops it should keep.
    for node in reversed(list(graph_module.graph.nodes)):
        if node in ops and not node.users:
            graph_module.graph.erase_node(node)
            del ops[node]
    graph_module.recompile()
    remaining = set(graph_module.graph.nodes)
    # Left to PyTorch: tensors only (``n_state // n_head`` of a shape is Python arithmetic).
    left = [node for node in recognised if node not in ops and node in remaining]
    return ops, [node.name for node in left if "tensor_meta" in node.meta]


def _functionalize(
    node: Node,
    target: object,
    order: dict[Node, int],
    ops: dict[Node, PointwiseOp],
    modules: dict[str, nn.Module],
) -> bool:
    """Make the in-place op ``node`` (writing into ``target``) out of place, if that is safe.

    Safe when ``target`` is a fresh tensor (not an input, parameter or view) that no view was
    taken of before ``node``: then every later reader of ``target`` can read ``node``'s result
    instead, and nothing else can observe the write. Rewires those readers and returns True.
    """
    if not isinstance(target, Node) or not fresh(target, ops, modules):
        return False
    earlier = [user for user in target.users if order[user] < order[node]]
    if not all(user in ops or fresh(user, ops, modules) for user in earlier):
        return False
    for user in list(target.users):
        if order[user] > order[node]:
            user.replace_input_with(target, node)
    return True


def mutated_values(
    graph_module: GraphModule, ops: dict[Node, PointwiseOp], modules: dict[str, nn.Module]
) -> set[Node]:
    """Values that may share memory with a tensor written in place by a PyTorch call."""
    parent: dict[Node, Node] = {}

    def find(node: Node) -> Node:
        while parent.get(node, node) is not node:
            node = parent[node]
        return node

    nodes = list(graph_module.graph.nodes)
    for node in nodes:
        if node.op in ("call_function", "call_method", "call_module") and not fresh(
            node, ops, modules
        ):  # may be a view of any of its inputs
            for value in node.all_input_nodes:
                parent[find(node)] = find(value)
    written = {
        find(node.args[0])
        for node in nodes
        if node not in ops
        and node.args
        and isinstance(node.args[0], Node)
        and writes_in_place(node, modules)
    }
    return {node for node in nodes if find(node) in written}


def writes_in_place(node: Node, modules: dict[str, nn.Module]) -> bool:
    if node.kwargs.get("inplace") is True:
        return True
    if node.op == "call_method":
        name = str(node.target)
        return name.endswith("_") and not name.startswith("__")
    if node.op == "call_function":
        return getattr(node.target, "__name__", "").endswith("_")
    if node.op == "call_module":
        return getattr(modules[str(node.target)], "inplace", False) is True
    return False


def fresh(node: Node, ops: dict[Node, PointwiseOp], modules: dict[str, nn.Module]) -> bool:
    """Whether ``node``'s value is a tensor of its own, aliasing nothing else in the graph."""
    if node in ops:
        op = ops[node]
        return not op.inplace or (
            isinstance(op.operands[0], Node) and fresh(op.operands[0], ops, modules)
        )
    if node.op == "call_module":
        return not isinstance(modules[str(node.target)], _VIEW_MODULES)
    if node.op in ("call_function", "call_method"):
        return getattr(node.target, "__name__", str(node.target)) in _FRESH_FUNCTIONS
    return False


def _recognise(node: Node, modules: dict[str, nn.Module]) -> PointwiseOp | None:
    if node.op == "call_function":
        return function_op(node.target, node.args, dict(node.kwargs))
    if node.op == "call_method":
        return method_op(str(node.target), node.args, dict(node.kwargs))
    if node.op == "call_module":
        return module_op(modules[str(node.target)], node.args, dict(node.kwargs))
    return None


def _wide_enough(op: PointwiseOp, row_min_widths: Mapping[str, int] | None) -> bool:
    source = op.operands[0]
    if row_min_widths is None or op.kind not in row_min_widths or not isinstance(source, Node):
        return False
    return source.meta["tensor_meta"].shape[-1] >= row_min_widths[op.kind]


def _types_ok(node: Node, op: PointwiseOp, dtype: torch.dtype) -> bool:
    """Tensors of the problem's dtype or bool, and plain Python numbers; nothing else."""
    allowed = (dtype, torch.bool)
    meta = node.meta.get("tensor_meta")
    if meta is None or not hasattr(meta, "dtype") or meta.dtype not in allowed:
        return False
    for value in op.operands:
        if not isinstance(value, Node):
            continue
        value_meta = value.meta.get("tensor_meta")
        if value_meta is not None:
            if not hasattr(value_meta, "dtype") or value_meta.dtype not in allowed:
                return False
        elif value.meta.get("type") not in (int, float, bool):
            return False
    return True


def lasting_writes(graph_module: GraphModule, ops: dict[Node, PointwiseOp]) -> list[Node]:
    """The PyTorch calls left in the graph that write in place into memory that may outlive
    the forward (an input, a parameter, a buffer, or a view that may be one of those)."""
    modules = dict(graph_module.named_modules())
    return [
        node
        for node in graph_module.graph.nodes
        if node not in ops
        and node.args
        and isinstance(node.args[0], Node)
        and writes_in_place(node, modules)
        and not fresh(node.args[0], ops, modules)
    ]
