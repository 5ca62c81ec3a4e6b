"""Trace a reference module with torch.fx and find the nodes a generated kernel may compute.

Shapes and dtypes come from running the traced graph on fake tensors (no real compute, so a
large convolution costs nothing here). Dropout in eval mode and ``nn.Identity`` are removed first:
they are identities and would otherwise split chains of pointwise ops.

What the graph takes as fixed is recorded beside it (``TraceFacts``): the plain values forward
read, the sequences it unpacked, the modules whose forward it inlined and the torch.nn modules
the proposer replaced (removed or fused) with what their own forward reads. The candidate
guards them (``agents.offline.guards``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import Graph, GraphModule, Node, Tracer
from torch.fx.passes.shape_prop import ShapeProp
from torch.fx.proxy import TraceError

from agents.offline.arguments import NotFixable, bind_arguments, drop_fixed_checks
from agents.offline.constants import take_off, traced_constant
from agents.offline.conv_bias import split_conv_bias
from agents.offline.fusable import DROPOUT_MODULES, fusable_ops, mutated_values
from agents.offline.hinted import HintedTracer, trace_hinted
from agents.offline.ops import PointwiseOp
from agents.offline.watch import AttributeWatch, Read, UnpackWatch
from harness.static.python_rules import LIBRARY_NAMES

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
    ArithmeticError,  # ZeroDivisionError, OverflowError: a size divided by another
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


_T = TypeVar("_T")


class NotTraceable(Exception):
    """The reference cannot be turned into a graph; the message says why, for the report."""


@dataclass
class TraceFacts:
    """What the graph takes as fixed, beyond the code itself."""

    reads: list[Read]  # plain values forward read: module attributes, config fields
    unpacked: dict[Node, set[int]]  # proxies unpacked (``a, b = ...``), into how many values
    inlined: list[str]  # submodules whose forward the graph inlines (their type is fixed)
    replaced: list[str]  # torch.nn submodules the proposer removed or fused into a kernel
    split_biases: list[str]  # convolutions called without their bias (agents.offline.conv_bias)
    replaced_reads: list[Read]  # what those submodules' own forward reads
    arguments: dict[str, object]  # forward's arguments as traced, by name (defaults included)
    fixed: dict[str, object]  # the arguments the graph holds as constants (agents.offline.hinted)
    conditions: list[tuple[Node, str]]  # what a value must be for the graph to hold: the hinted
    # trace's branches ("{0}", "not {0}") and lengths ("len({0}) == 2"), with {0} the value


@dataclass
class TracedModule:
    """The reference's graph with shapes, and its nodes that a fused kernel can compute."""

    graph_module: GraphModule
    ops: dict[Node, PointwiseOp]
    dtype: torch.dtype
    left_in_pytorch: list[str]  # pointwise ops recognised but not fusable (dtype, in-place)
    facts: TraceFacts


class _InliningTracer(Tracer):
    """torch.fx's tracer, noting which submodules it traces through rather than calls."""

    def __init__(self) -> None:
        super().__init__()
        self.inlined: list[str] = []

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        """torch.nn's layers, as torch.fx has them, and the layers of a library a candidate may
        import (einops' ``Rearrange``: the candidate calls it as the reference does)."""
        kind = type(m)
        library_layer = kind.__name__ in LIBRARY_NAMES.get(kind.__module__, ())
        return library_layer or super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m, forward, args, kwargs):  # type: ignore[no-untyped-def]
        path = self.path_of_module(m)
        if not self.is_leaf_module(m, path) and path not in self.inlined:
            self.inlined.append(path)
        return super().call_module(m, forward, args, kwargs)


class _HintedInliningTracer(_InliningTracer, HintedTracer):
    """The same, knowing each value's real shape (``agents.offline.hinted``)."""


def trace(
    reference: nn.Module,
    inputs: list,
    dtype: torch.dtype,
    split_bias: bool = False,
    row_min_widths: Mapping[str, int] | None = None,
    keywords: Sequence[str] = (),
) -> TracedModule:
    """``inputs``: forward's arguments, the last ``len(keywords)`` passed by those names;
    ``split_bias``: convolutions' biases added by their epilogue (``agents.offline.conv_bias``);
    ``row_min_widths``: the row reductions of each kind over rows this wide or wider fused
    (``agents.offline.rows``); None: none.

    The trace is torch.fx's symbolic one where it can be; where forward uses its inputs' shapes
    as Python values, it knows them (``agents.offline.hinted``) and records the conditions
    the graph then holds under."""
    try:
        arguments, unset = bind_arguments(reference, inputs, list(keywords))
    except NotFixable as err:
        raise NotTraceable(f"cannot trace: {err}") from err
    attributes_before = set(vars(reference))
    try:
        tracer: _InliningTracer = _InliningTracer()
        graph, reads, unpacks = _watched(
            lambda _: tracer.trace(reference, concrete_args=unset), reference
        )
        fixed: dict[str, object] = dict(unset)
        drop_fixed_checks(graph, list(arguments), set(unset))
    except (*_USER_CODE_ERRORS, NotFixable) as symbolic:
        tracer = hinted = _HintedInliningTracer()

        def knowing_shapes(watch: AttributeWatch) -> tuple[Graph, dict[str, object]]:
            hinted.leaf_calls = watch.paused
            return trace_hinted(hinted, reference, arguments)

        try:
            (graph, fixed), reads, unpacks = _watched(knowing_shapes, reference)
        except (*_USER_CODE_ERRORS, NotFixable) as err:
            raise NotTraceable(
                f"cannot trace: {type(symbolic).__name__}: {_first_line(symbolic)}; and knowing "
                f"the inputs' shapes: {type(err).__name__}: {_first_line(err)}"
            ) from err
    try:
        graph_module = GraphModule(tracer.root, graph, type(reference).__name__)
    except SyntaxError as err:  # torch.fx's code for a signature it cannot write
        raise NotTraceable(f"cannot trace: torch.fx wrote invalid code: {err.msg}") from err
    take_off(reference, attributes_before, graph_module)
    modules = dict(graph_module.named_modules())
    if any(traced_constant(node) is not None for node in mutated_values(graph_module, {}, modules)):
        # torch.fx reads it anew at every use: a write through one read is lost to the others
        raise NotTraceable(
            "cannot trace: forward writes in place into a tensor it makes of constants "
            "(torch.fx keeps the value it had when traced)"
        )
    values = [arguments[str(node.target)] for node in graph.nodes if node.op == "placeholder"]
    removed = _remove_identities(graph_module)
    _propagate_shapes(graph_module, values)
    ops, left = fusable_ops(graph_module, dtype, row_min_widths)
    split = split_conv_bias(graph_module, ops) if split_bias else []
    if split:
        _propagate_shapes(graph_module, values)
        ops, left = fusable_ops(graph_module, dtype, row_min_widths)
    _devices_from_operands(graph_module, ops)
    fused = [(str(node.target), node.args[0]) for node in ops if node.op == "call_module"]
    replaced = [*removed, *split, *fused]
    facts = TraceFacts(
        reads=reads.reads(),
        unpacked={node: counts for node, counts in unpacks.counts.items() if node.graph is graph},
        inlined=[path for path in tracer.inlined if path],
        replaced=sorted({path for path, _ in replaced}),
        split_biases=[path for path, _ in split],
        replaced_reads=_replaced_reads(reference, replaced),
        arguments=arguments,
        fixed=fixed,
        conditions=list(getattr(tracer, "conditions", [])),
    )
    return TracedModule(graph_module, ops, dtype, left, facts)


def _watched(
    make: Callable[[AttributeWatch], _T], reference: nn.Module
) -> tuple[_T, AttributeWatch, UnpackWatch]:
    """``make(watch)`` (a trace), with the values it reads and the proxies it unpacks watched;
    leaf modules too, whose attributes forward may read (``self.proj.out_features``)."""
    with (
        AttributeWatch(reference, list(reference.modules())) as reads,
        UnpackWatch() as unpacks,
    ):
        return make(reads), reads, unpacks


def _devices_from_operands(graph_module: GraphModule, ops: dict[Node, PointwiseOp]) -> None:
    """``y.device`` of a pointwise result read from an operand of the same shape instead (the
    same device): ``torch.tensor(0.0, device=x.device)`` after ``x = a + b`` would otherwise
    read the kernel's output before the kernel ran, and split the chain in two."""
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or node.target is not getattr or node.args[1:] != ("device",):
            continue
        source = node.args[0]
        while isinstance(source, Node) and source in ops:
            same = [
                value
                for value in ops[source].operands
                if isinstance(value, Node)
                and "tensor_meta" in value.meta
                and value.meta["tensor_meta"].shape == source.meta["tensor_meta"].shape
            ]
            if not same or not same[0].meta["tensor_meta"].shape:
                break  # a 0-d result's operands may be on another device than it
            source = same[0]
        node.args = (source, "device")
    graph_module.recompile()


def _propagate_shapes(graph_module: GraphModule, inputs: list) -> None:
    try:
        with torch.no_grad():
            ShapeProp(graph_module, fake_mode=FakeTensorMode(allow_non_fake_inputs=True)).propagate(
                *inputs
            )
    except _USER_CODE_ERRORS as err:
        raise NotTraceable(
            f"cannot trace: shape propagation failed: {type(err).__name__}: {_first_line(err)}"
        ) from err


def _replaced_reads(reference: nn.Module, replaced: Sequence[tuple[str, object]]) -> list[Read]:
    """What each replaced torch.nn module's own forward reads (``p`` and ``training`` of a
    dropout, ``approximate`` of a GELU), seen by calling it once on a fake tensor shaped like
    its traced input."""
    reads: dict[str, Read] = {}
    for path, source in replaced:
        module = reference.get_submodule(path)
        meta = source.meta.get("tensor_meta") if isinstance(source, Node) else None
        if meta is None or not hasattr(meta, "shape"):
            raise NotTraceable(f"cannot trace: the input of {path} has no traced shape")
        try:
            with (
                AttributeWatch(reference, [module]) as watch,
                FakeTensorMode(allow_non_fake_inputs=True),  # a replaced conv's parameters
                torch.no_grad(),
            ):
                module(torch.empty(meta.shape, dtype=meta.dtype))
        except _USER_CODE_ERRORS as err:
            raise NotTraceable(
                f"cannot trace: {path} fails on its traced input: {_first_line(err)}"
            ) from err
        reads.update((read.target, read) for read in watch.reads())
    return list(reads.values())


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:300] if text else "(no message)"


def _remove_identities(graph_module: GraphModule) -> list[tuple[str, Node]]:
    """Remove the identities; the modules removed, each with the node of its input."""
    modules = dict(graph_module.named_modules())
    removed = []
    for node in list(graph_module.graph.nodes):
        if _is_identity(node, modules):
            if node.op == "call_module":
                removed.append((str(node.target), node.args[0]))
            node.replace_all_uses_with(node.args[0])
            graph_module.graph.erase_node(node)
    graph_module.recompile()
    return removed


def _is_identity(node: Node, modules: dict[str, nn.Module]) -> bool:
    if not node.args or not isinstance(node.args[0], Node):
        return False
    if node.op == "call_module":
        module = modules[str(node.target)]
        if isinstance(module, nn.Identity):
            return True
        return isinstance(module, DROPOUT_MODULES) and (not module.training or module.p == 0)
    if node.op == "call_function" and node.target in _DROPOUT_FUNCTIONS:
        flag = "train" if node.target is torch.dropout else "training"
        values = dict(zip(("input", "p", flag), node.args, strict=False))
        values.update(node.kwargs)
        # F.alpha_dropout and F.feature_alpha_dropout default to training=False, the rest to True.
        default = node.target not in (F.alpha_dropout, F.feature_alpha_dropout)
        return values.get(flag, default) is False or bool(values.get("p", 0.5) == 0)
    return False
