"""Trace a reference module with torch.fx and find the nodes a generated kernel may compute.

Shapes and dtypes come from running the traced graph on fake tensors (no real compute, so a
large convolution costs nothing here). Dropout in eval mode and ``nn.Identity`` are removed first:
they are identities and would otherwise split chains of pointwise ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import GraphModule, Node, symbolic_trace
from torch.fx.passes.shape_prop import ShapeProp
from torch.fx.proxy import TraceError

from agents.offline.ops import PointwiseOp, function_op, method_op, module_op

# What tracing or fake execution of user code raises when a module is beyond torch.fx.
_USER_CODE_ERRORS = (
    TraceError,
    TypeError,
    AttributeError,
    RuntimeError,
    ValueError,
    NotImplementedError,
    AssertionError,
    IndexError,
    KeyError,
)
_DROPOUT_MODULES = (
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)
_DROPOUT_FUNCTIONS = (
    F.dropout,
    F.dropout1d,
    F.dropout2d,
    F.dropout3d,
    F.alpha_dropout,
    F.feature_alpha_dropout,
    torch.dropout,
)
# Library calls known to return a fresh tensor: an in-place op on their result is private.
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
_VIEW_MODULES = (nn.Flatten, nn.Unflatten, nn.Identity, *_DROPOUT_MODULES)


class NotTraceable(Exception):
    """The reference cannot be turned into a graph; the message says why, for the report."""


@dataclass
class TracedModule:
    """The reference's graph with shapes, and its nodes that a fused kernel can compute."""

    graph_module: GraphModule
    ops: dict[Node, PointwiseOp]
    dtype: torch.dtype
    left_in_pytorch: list[str]  # pointwise ops recognised but not fusable (dtype, in-place)


def trace(reference: nn.Module, inputs: list, dtype: torch.dtype) -> TracedModule:
    try:
        graph_module = symbolic_trace(reference)
    except _USER_CODE_ERRORS as err:
        raise NotTraceable(f"cannot trace: {type(err).__name__}: {_first_line(err)}") from err
    _remove_identities(graph_module)
    try:
        with torch.no_grad():
            ShapeProp(graph_module, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(
                *inputs
            )
    except _USER_CODE_ERRORS as err:
        raise NotTraceable(
            f"cannot trace: shape propagation failed: {type(err).__name__}: {_first_line(err)}"
        ) from err
    ops, left = _fusable_ops(graph_module, dtype)
    return TracedModule(graph_module, ops, dtype, left)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def _remove_identities(graph_module: GraphModule) -> None:
    modules = dict(graph_module.named_modules())
    for node in list(graph_module.graph.nodes):
        if _is_identity(node, modules):
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
    graph_module.recompile()


def _is_identity(node: Node, modules: dict[str, nn.Module]) -> bool:
    if not node.args or not isinstance(node.args[0], Node):
        return False
    if node.op == "call_module":
        module = modules[str(node.target)]
        if isinstance(module, nn.Identity):
            return True
        return isinstance(module, _DROPOUT_MODULES) and (not module.training or module.p == 0)
    if node.op == "call_function" and node.target in _DROPOUT_FUNCTIONS:
        flag = "train" if node.target is torch.dropout else "training"
        values = dict(zip(("input", "p", flag), node.args, strict=False))
        values.update(node.kwargs)
        # F.alpha_dropout and F.feature_alpha_dropout default to training=False, the rest to True.
        default = node.target not in (F.alpha_dropout, F.feature_alpha_dropout)
        return values.get(flag, default) is False or bool(values.get("p", 0.5) == 0)
    return False


def _fusable_ops(
    graph_module: GraphModule, dtype: torch.dtype
) -> tuple[dict[Node, PointwiseOp], list[str]]:
    """The pointwise nodes a kernel may compute, and the names of those it may not."""
    modules = dict(graph_module.named_modules())
    order = {node: index for index, node in enumerate(graph_module.graph.nodes)}
    ops: dict[Node, PointwiseOp] = {}
    recognised: list[Node] = []
    for node in graph_module.graph.nodes:
        op = _recognise(node, modules)
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
    mutated = _mutated_values(graph_module, ops, modules)
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
    return ops, [node.name for node in recognised if node not in ops and node in remaining]


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
    if not isinstance(target, Node) or not _fresh(target, ops, modules):
        return False
    earlier = [user for user in target.users if order[user] < order[node]]
    if not all(user in ops or _fresh(user, ops, modules) for user in earlier):
        return False
    for user in list(target.users):
        if order[user] > order[node]:
            user.replace_input_with(target, node)
    return True


def _mutated_values(
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
        if node.op in ("call_function", "call_method", "call_module") and not _fresh(
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
        and _writes_in_place(node, modules)
    }
    return {node for node in nodes if find(node) in written}


def _writes_in_place(node: Node, modules: dict[str, nn.Module]) -> bool:
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


def _fresh(node: Node, ops: dict[Node, PointwiseOp], modules: dict[str, nn.Module]) -> bool:
    """Whether ``node``'s value is a tensor of its own, aliasing nothing else in the graph."""
    if node in ops:
        op = ops[node]
        return not op.inplace or (
            isinstance(op.operands[0], Node) and _fresh(op.operands[0], ops, modules)
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
