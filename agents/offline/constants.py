"""Tensors that torch.fx made constants while tracing.

``torch.min(x, torch.tensor(self.constant_value))`` (KernelBench level2 31) runs
``torch.tensor(...)`` once, in the trace: its argument is a Python number, not a traced value.
torch.fx keeps the tensor it made as an attribute of the module it traced (``_tensor_constant0``)
and reads it there with a ``get_attr`` node. The module a candidate copies has no such
attribute, and the value it stands for is made anew on every call, on the CPU.

So ``trace`` takes those attributes off the reference again and names them in the traced
module's ``meta``; a fused kernel takes a 0-dim constant as the Python number it was made from
(``inlined``), as it takes ``x * 2.0``'s; and where a PyTorch call still reads one, forward
makes it as the reference did (``constant_source``). The value was made from the module's
attributes as they were at tracing, and the guards hold those (``self.constant_value == 0.5``).
A constant that forward writes into in place is refused (``trace``): torch.fx reads it with a
``get_attr`` of its own at every use, so a write through one is lost to the others.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.fx import GraphModule, Node

from agents.offline.ops import PointwiseOp

META_KEY = "kernelpilot_traced_constants"
# Forward makes a constant again on every call: a literal this long is the most it writes.
MAX_ELEMENTS = 64


class ConstantTooLarge(Exception):
    """A traced constant too large to write into forward as a literal."""


def take_off(reference: nn.Module, attributes_before: set[str], graph_module: GraphModule) -> None:
    """Remove the attributes the trace added to ``reference`` (its tensor constants), and
    name them in ``graph_module.meta``, which keeps their values."""
    made = {name for name in vars(reference) if name not in attributes_before}
    for name in made:
        delattr(reference, name)
    graph_module.meta[META_KEY] = {name for name in made if hasattr(graph_module, name)}


def traced_constant(node: Node) -> torch.Tensor | None:
    """The value of a ``get_attr`` node that reads a constant the trace made, else None."""
    if node.op != "get_attr":
        return None
    owner = node.graph.owning_module
    if owner is None or str(node.target) not in owner.meta.get(META_KEY, ()):
        return None
    value = getattr(owner, str(node.target))
    return value if isinstance(value, torch.Tensor) else None


def inlined(op: PointwiseOp) -> PointwiseOp:
    """``op`` with each 0-dim traced constant among its operands as its Python number.
    Type promotion is the same: a 0-dim tensor, as a Python number, does not raise the dtype
    of a tensor of the same category (floating, integral, bool)."""
    operands = []
    for value in op.operands:
        constant = traced_constant(value) if isinstance(value, Node) else None
        operands.append(value if constant is None or constant.dim() else constant.item())
    return PointwiseOp(op.kind, tuple(operands), op.inplace)


def constant_source(value: torch.Tensor) -> str:
    """Python that makes ``value`` again as forward made it: a literal, on the CPU."""
    if value.numel() > MAX_ELEMENTS:
        raise ConstantTooLarge(
            f"forward makes a constant tensor of {value.numel()} elements (more than "
            f"{MAX_ELEMENTS} to write as a literal)"
        )
    dtype = str(value.dtype).removeprefix("torch.")
    return f"torch.tensor({_literal(value.tolist())}, dtype=torch.{dtype})"


def _literal(value: object) -> str:
    """A number or nested list as Python source; infinities and NaN through ``math``, which
    the candidate module imports."""
    if isinstance(value, list):
        return "[" + ", ".join(map(_literal, value)) + "]"
    if isinstance(value, float) and math.isnan(value):
        return "math.nan"
    if isinstance(value, float) and math.isinf(value):
        return "math.inf" if value > 0 else "-math.inf"
    return repr(value)
