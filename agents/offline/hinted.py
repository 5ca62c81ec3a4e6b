"""A trace that knows each value's real shape, for a forward torch.fx cannot trace with proxies
alone.

Real modules use their inputs' shapes as Python values: ``q.view(*q.shape[:2], self.n_head, -1)``
iterates a proxy, ``assert t <= self.block_size`` and ``is_causal=n_ctx > 1`` ask a proxy for a
bool, ``if targets is not None`` branches on an argument left at its default. torch.fx's
symbolic trace refuses the first two and takes the wrong branch on the third. This trace
(``MetaTracer``'s: no memory, no compute) carries beside each proxy the value it has at the
traced inputs, a meta tensor for a tensor and the number itself for a size. Shapes stay values
of the graph, so it holds for other shapes, and only what Python needs as a plain value is
taken from the hint and recorded as a condition: a shape iterated (its length), a comparison
branched on (its truth), a size used as an index (its value). The arguments that are not
tensors (flags, ``None`` for a mask or a cache) are the constants they were called with.

The candidate checks each condition where its value is made, and each constant on entry
(``agents.offline.guards``), and runs the original forward where one does not hold.
Data-dependent Python (``if x.sum() > 0``, ``x.item()``) still stops the trace: a meta tensor
has no values.

    arguments, unset = bind_arguments(module, inputs, keywords)  # agents.offline.arguments
    tracer = HintedTracer()
    graph, fixed = trace_hinted(tracer, module, arguments)      # fixed: {"mask": None, ...}
    tracer.conditions                                           # [(node, "len({0}) == 2"), ...]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
import torch.nn as nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx import Graph, Node, Proxy, Tracer
from torch.fx.experimental.meta_tracer import (
    MetaAttribute,
    MetaDeviceAttribute,
    MetaProxy,
    MetaTracer,
)
from torch.fx.node import map_aggregate
from torch.fx.proxy import TraceError

from agents.offline.arguments import drop_fixed_checks

# What a layer's forward raises on fake inputs it cannot take (a proxy for a tensor, a shape
# it refuses): its output then has no known shape.
_LAYER_ERRORS = (
    RuntimeError,
    TypeError,
    ValueError,
    AssertionError,
    IndexError,
    AttributeError,
    ArithmeticError,  # ZeroDivisionError, OverflowError
)


class _HintedProxy(MetaProxy):
    """A proxy and its value at the traced inputs (``MetaTracer`` keeps it as ``_tensor_meta``,
    whatever its type). A shape, a size or a dtype read is a graph value with its own hint;
    where Python needs a plain value (``bool``, ``len``, iteration, an index), the hint
    answers and the tracer records the condition under which it holds."""

    def _hint(self) -> Any:
        return getattr(self, "_tensor_meta", _NO_HINT)

    def _node_value(self, kind: str, target: Any, *args: Any) -> Any:
        return self.tracer.create_proxy(kind, target, (self, *args), {})

    @property
    def shape(self) -> Any:
        return self._node_value("call_function", getattr, "shape")

    @property
    def dtype(self) -> Any:
        return self._node_value("call_function", getattr, "dtype")

    def size(self, dim: int | None = None) -> Any:
        if dim is None:
            return self._node_value("call_method", "size")
        return self._node_value("call_method", "size", dim)

    def numel(self) -> Any:
        return self._node_value("call_method", "numel")

    def dim(self) -> Any:  # a rank may follow from sizes (x.squeeze(1)): a value, not a constant
        return self._node_value("call_method", "dim")

    @property
    def ndim(self) -> Any:
        return self._node_value("call_function", getattr, "ndim")

    def _holds(self, template: str) -> None:
        self.tracer.conditions.append((self.node, template))  # type: ignore[attr-defined]

    def __iter__(self) -> Any:
        value = self._hint()
        if not isinstance(value, tuple | list):
            return super().__iter__()
        self._holds(f"len({{0}}) == {len(value)}")
        return iter([self[index] for index in range(len(value))])  # type: ignore[index]

    def __len__(self) -> int:
        value = self._hint()
        if isinstance(value, tuple | list):
            self._holds(f"len({{0}}) == {len(value)}")
            return len(value)
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            # On a value of its own: the tensor's node may be fused away or replaced.
            length = self.tracer.create_proxy("call_function", len, (self,), {})
            length._holds(f"{{0}} == {value.shape[0]}")
            return int(value.shape[0])
        return super().__len__()

    def __bool__(self) -> bool:
        value = self._hint()
        if type(value) not in (bool, int):
            return super().__bool__()  # a tensor's truth is its data: not traceable
        self._holds("{0}" if value else "not {0}")
        return bool(value)

    def __index__(self) -> int:
        value = self._hint()
        if type(value) is not int:
            raise TraceError(f"a traced value is used as an index: {self.node.name}")
        self._holds(f"{{0}} == {value}")
        return value


_NO_HINT = object()


class HintedTracer(MetaTracer):
    """torch.fx's ``MetaTracer`` (its inputs as meta tensors, its constructors patched) with
    ``_HintedProxy`` for its values and the conditions they recorded. Each value's hint is
    computed here: the op run on its arguments' hints, a tensor constant (a buffer read in
    forward) taken to the meta device first, and a layer's output from its own forward run on
    fake tensors against its real weights. ``leaf_calls`` wraps each such layer run: a trace
    watching forward's reads pauses there (``AttributeWatch.paused``)."""

    leaf_calls: Callable[[], AbstractContextManager[Any]] = nullcontext

    def __init__(self) -> None:
        super().__init__()
        self.conditions: list[tuple[Node, str]] = []

    def proxy(self, node: Any) -> _HintedProxy:
        return _HintedProxy(node, self)

    def create_proxy(  # type: ignore[override]
        self, kind: str, target: Any, args: Any, kwargs: Any, *rest: Any, **named: Any
    ) -> Any:
        proxy = Tracer.create_proxy(self, kind, target, args, kwargs, *rest, **named)
        if kind == "placeholder":
            hint = self.meta_args.get(target, _NO_HINT)
        elif kind == "call_module":
            with self.leaf_calls():
                hint = self._layer_output(args, kwargs)
        else:
            hint = self._hint_of(kind, target, args, kwargs)
        if hint is not _NO_HINT:
            proxy.install_tensor_meta(hint)
        return proxy

    def _hint_of(self, kind: str, target: Any, args: Any, kwargs: Any) -> Any:
        """The op run on its arguments' hints; _NO_HINT where one has none or it fails."""
        try:
            hints: Any = map_aggregate((args, kwargs), _hint)
        except _NoHint:
            return _NO_HINT
        positional, keywords = hints[0], dict(hints[1])
        if target in self.orig_fns:  # torch.arange(t), torch.zeros(B, T, C): made on meta
            keywords["device"] = "meta"
        self._disable_module_getattr = True  # attributes as they are, not graph values
        try:
            if kind == "call_function":
                return target(*positional, **keywords)
            if kind == "call_method":
                return getattr(positional[0], target)(*positional[1:], **keywords)
            if kind == "get_attr":
                value = self.root
                for name in str(target).split("."):
                    value = getattr(value, name)
                return value.to("meta") if isinstance(value, torch.Tensor) else value
        except _LAYER_ERRORS:
            return _NO_HINT
        finally:
            self._disable_module_getattr = False
        return _NO_HINT

    def _layer_output(self, args: Any, kwargs: Any) -> Any:
        """The layer's output as a meta tensor; _NO_HINT where its inputs have none or its
        forward fails on fakes."""
        try:
            hints: Any = map_aggregate((args, kwargs), _hint)
        except _NoHint:
            return _NO_HINT
        self._disable_module_getattr = True  # the layer's own weights, not graph values
        try:
            with FakeTensorMode(allow_non_fake_inputs=True):
                fakes: Any = map_aggregate(hints, _on_cpu)
                output = self.orig_forward(*fakes[0], **fakes[1])
        except _LAYER_ERRORS:
            return _NO_HINT
        finally:
            self._disable_module_getattr = False
        if not isinstance(output, torch.Tensor):
            return _NO_HINT
        return torch.empty_strided(output.shape, output.stride(), dtype=output.dtype, device="meta")


class _NoHint(Exception):
    """An argument of an op has no hint: neither has the op's value."""


def _hint(value: Any) -> Any:
    """What an op's argument is at the traced inputs: a proxy's hint, a tensor constant on the
    meta device (an op's other arguments are meta tensors), anything else itself."""
    if isinstance(value, MetaDeviceAttribute):
        return "meta"
    if isinstance(value, MetaAttribute):  # x.T, read lazily: the attribute of its root's hint
        try:
            return getattr(_hint(value.root), value.attr)
        except AttributeError:
            raise _NoHint from None
    if isinstance(value, Proxy):
        found = getattr(value, "_tensor_meta", _NO_HINT)
        if found is _NO_HINT:
            raise _NoHint
        return found
    if isinstance(value, torch.Tensor) and not value.is_meta:
        return value.to("meta")
    return value


def _on_cpu(value: Any) -> Any:
    """A meta tensor as a fake one on the CPU, where the reference's weights are."""
    if isinstance(value, torch.Tensor) and value.is_meta:
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="cpu")
    return value


def trace_hinted(
    tracer: HintedTracer, module: nn.Module, arguments: dict[str, object]
) -> tuple[Graph, dict[str, object]]:
    """The graph of ``module``'s forward at ``arguments`` (``bind_arguments``), and the
    arguments that are constants in it, by name: every one that is not a tensor. The
    conditions the graph holds under are ``tracer.conditions``."""
    metas = {
        name: value.to("meta")
        for name, value in arguments.items()
        if isinstance(value, torch.Tensor)
    }
    fixed = {name: value for name, value in arguments.items() if name not in metas}
    # A value whose hint cannot be computed has none: asking it for a plain value stops the
    # trace as a symbolic trace stops.
    with _einops_sees_proxies():
        graph = tracer.trace(module, metas, concrete_args=fixed)
    drop_fixed_checks(graph, list(arguments), set(fixed))
    return graph, fixed


@contextmanager
def _einops_sees_proxies() -> Iterator[None]:
    """Where the traced code uses einops (``rearrange(q, 'b n (h d) -> b h n d', h=8)``), einops
    takes a hinted proxy as a torch tensor while the trace runs: the trace goes through it into
    the reshapes and permutes it makes, and the lengths it takes are recorded as conditions.
    einops checks an axis's size only where it is a plain int, never a traced one: an input the
    reference refuses with its ``EinopsError`` (``h=4`` of a width 5) fails in the kernel path's
    reshape instead, or, where no reshape follows, is computed.
    einops keeps the backend of each tensor type in ``_type2backend``; its torch backend is
    entered there for the proxy's type, and taken out after. Nothing is imported where the
    reference did not import einops."""
    backends = sys.modules.get("einops._backends")
    if backends is None:
        yield
        return
    backends._type2backend[_HintedProxy] = backends.TorchBackend()
    try:
        yield
    finally:
        backends._type2backend.pop(_HintedProxy, None)
