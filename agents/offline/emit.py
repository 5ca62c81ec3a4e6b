"""Write the candidate's Python: the fx graph re-emitted as ``forward``, around the kernels.

Library ops come back as the same PyTorch calls (``self.linear(x)``, ``torch.matmul``...), each
fused group as one ``_ext.<kernel>(...)`` call. Only ``torch``, ``nn``, ``F`` and ``math`` are
in scope in the candidate, so a call that cannot be named through them stops the proposal.
The guards (``agents.offline.guards``) go first, and where a value is made or before a kernel;
each returns the original forward's result where it does not hold.
"""

from __future__ import annotations

import builtins
import keyword
import math
import operator
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Node

from agents.offline.constants import ConstantTooLarge, constant_source, traced_constant
from agents.offline.conv_layout import HELPER
from agents.offline.kernel import FusedKernel
from harness.static.python_rules import FORBIDDEN_CALLS

if TYPE_CHECKING:  # guards.py writes its checks with this module's helpers
    from agents.offline.guards import Check, Guards

# Names the candidate needs, and the builtins the static checks refuse even as variables
# (their own table): a value of the graph named like one is renamed.
RESERVED = {"self", "torch", "nn", "F", "math", "load_inline", "super", "_ext"} | FORBIDDEN_CALLS
_BINARY = {
    operator.add: "+",
    operator.sub: "-",
    operator.mul: "*",
    operator.truediv: "/",
    operator.floordiv: "//",
    operator.mod: "%",
    operator.pow: "**",
    operator.matmul: "@",
    operator.and_: "&",
    operator.or_: "|",
    operator.xor: "^",
    operator.lshift: "<<",
    operator.rshift: ">>",
    operator.eq: "==",
    operator.ne: "!=",
    operator.lt: "<",
    operator.le: "<=",
    operator.gt: ">",
    operator.ge: ">=",
}
_UNARY = {operator.neg: "-", operator.pos: "+", operator.invert: "~", operator.not_: "not "}
_NAMESPACES = (
    ("F", F),
    ("torch", torch),
    ("torch.special", torch.special),
    ("torch.linalg", torch.linalg),
    ("torch.fft", torch.fft),
    ("math", math),
)
_SAFE_BUILTINS = {"len", "int", "float", "bool", "max", "min", "abs", "range", "tuple", "list"}


class CannotEmit(Exception):
    """The graph uses something the candidate module cannot spell; the message says what."""


def forward_source(
    steps: list[Node | tuple[Node, ...]],
    kernels: dict[tuple[Node, ...], FusedKernel],
    reference: nn.Module,
    guards: Guards,
    fallback: str,
    lasting: set[Node],
    channels_last: frozenset[Node] = frozenset(),
) -> str:
    """``def forward(...)`` of ModelNew, indented for the class body. ``fallback`` calls the
    original forward; ``lasting`` are the calls that write into memory outliving the call (a
    guard after one would have the original forward write it again); ``channels_last``: the
    convolutions whose input goes through ``_ext.kp_channels_last`` (``conv_layout``)."""
    nodes = [node for step in steps for node in (step if isinstance(step, tuple) else (step,))]
    names = _names(nodes)
    params: list[str] = []
    body = _guard(guards.entry, names, fallback, None)
    wrote: Node | None = None
    checked: set[Node] = set()
    read = _read_values(steps, kernels)
    for step in steps:
        if isinstance(step, Node) and traced_constant(step) is not None and step not in read:
            continue  # only kernels read it, and they have its number
        if isinstance(step, tuple):
            body += _guard(guards.before.get(step, []), names, fallback, wrote)
            body.append(_kernel_call(kernels[step], names))
            made = [item.node for item in kernels[step].outputs]
        elif step.op == "placeholder":
            params.append(_parameter(step, names))
            continue
        else:
            body.append(_statement(step, names, reference, step in channels_last))
            wrote = step if step in lasting else wrote
            made = [step]
        for node in made:
            body += _guard(guards.after.get(node, []), names, fallback, wrote)
            checked.add(node)
    if unchecked := [
        node.name for node, checks in guards.after.items() if checks and node not in checked
    ]:
        # A value made inside a kernel (or removed): its checks would silently not run.
        raise CannotEmit(f"no place to check {', '.join(unchecked)} after it is made")
    lines = [f"def forward(self, {', '.join(params)}):" if params else "def forward(self):"]
    lines += [f"    {line}" for line in body]
    return "\n".join(f"    {line}" for line in lines)


def _read_values(
    steps: list[Node | tuple[Node, ...]], kernels: dict[tuple[Node, ...], FusedKernel]
) -> set[Node]:
    """The values forward's statements and kernel calls read."""
    read: set[Node] = set()
    for step in steps:
        if isinstance(step, tuple):
            read.update(item.node for item in kernels[step].inputs)
            read.update(kernels[step].scalars)
        else:
            read.update(step.all_input_nodes)
    return read


def _guard(
    checks: list[Check], names: dict[Node, str], fallback: str, wrote: Node | None
) -> list[str]:
    if not checks:
        return []
    if wrote is not None:
        raise CannotEmit(
            f"a guard would come after {wrote.name}, which writes in place into memory that "
            "outlives the call: falling back to the original forward there would write it twice"
        )
    texts = [check.text(names) for check in checks]
    if len(texts) == 1 and len(texts[0]) < 80:
        return [f"if not ({texts[0]}):", f"    return {fallback}"]
    conditions = [
        f"    {text}" if index == 0 else f"    and {text}" for index, text in enumerate(texts)
    ]
    return ["if not (", *conditions, "):", f"    return {fallback}"]


def _names(nodes: list[Node]) -> dict[Node, str]:
    names = {}
    for node in nodes:
        name = str(node.target) if node.op == "placeholder" else node.name
        if name.startswith("*"):
            raise CannotEmit(f"forward takes variadic arguments ({name})")
        if name in RESERVED or keyword.iskeyword(name):
            if node.op == "placeholder":
                raise CannotEmit(f"forward argument {name!r} shadows a name the candidate needs")
            name = f"{name}_value"
        names[node] = name
    if len(set(names.values())) != len(names):
        raise CannotEmit("forward's values cannot be given distinct names")
    return names


def _parameter(node: Node, names: dict[Node, str]) -> str:
    if node.args:
        return f"{names[node]}={format_value(node.args[0], names)}"
    return names[node]


def _kernel_call(kernel: FusedKernel, names: dict[Node, str]) -> str:
    args = [names[item.node] for item in kernel.inputs] + [names[node] for node in kernel.scalars]
    targets = ", ".join(names[item.node] for item in kernel.outputs)
    return f"{targets} = _ext.{kernel.name}({', '.join(args)})"


def _statement(
    node: Node, names: dict[Node, str], reference: nn.Module, channels_last: bool = False
) -> str:
    if node.op == "output":
        return f"return {format_value(node.args[0], names)}"
    if node.op == "get_attr":
        if (constant := traced_constant(node)) is not None:
            try:
                return f"{names[node]} = {constant_source(constant)}"
            except ConstantTooLarge as err:
                raise CannotEmit(str(err)) from err
        return f"{names[node]} = {attribute_path(reference, str(node.target))}"
    args = [format_value(value, names) for value in node.args]
    if channels_last:  # a convolution's input, made channels-last (its first argument)
        args[0] = f"_ext.{HELPER}({args[0]})"
    args += [f"{key}={format_value(value, names)}" for key, value in node.kwargs.items()]
    if node.op == "call_module":
        call = f"{attribute_path(reference, str(node.target))}({', '.join(args)})"
    elif node.op == "call_method":
        if not args or not _plain_name(str(node.target)):
            raise CannotEmit(f"method call {node.target!r} on nothing")
        call = f"{args[0]}.{node.target}({', '.join(args[1:])})"
    else:
        call = _function_call(node, args)
    return f"{names[node]} = {call}"


def _function_call(node: Node, args: list[str]) -> str:
    target = node.target
    if node.kwargs and target in (*_BINARY, *_UNARY, operator.getitem, builtins.getattr):
        raise CannotEmit(f"{target} called with keyword arguments")
    if target in _BINARY and len(args) == 2:
        return f"{_operand(args[0])} {_BINARY[target]} {_operand(args[1])}"
    if target in _UNARY and len(args) == 1:
        return f"{_UNARY[target]}{_operand(args[0])}"
    if target is operator.getitem and len(args) == 2:
        return f"{_operand(args[0])}[{args[1]}]"
    if target is builtins.getattr and len(node.args) == 2 and _plain_name(str(node.args[1])):
        return f"{_operand(args[0])}.{node.args[1]}"
    return f"{qualified_name(target)}({', '.join(args)})"


def qualified_name(function: object) -> str:
    """How the candidate names a library function: ``F.linear``, ``torch.matmul``, ``len``."""
    name = getattr(function, "__name__", None)
    if isinstance(name, str):
        for prefix, namespace in _NAMESPACES:
            if getattr(namespace, name, None) is function:
                return f"{prefix}.{name}"
        if name in _SAFE_BUILTINS and getattr(builtins, name) is function:
            return name
    module = getattr(function, "__module__", None)
    raise CannotEmit(f"cannot call {module}.{name} from the candidate (only torch, F and math)")


def attribute_path(reference: nn.Module, target: str) -> str:
    """``self.layers[0].weight`` for the fx target ``layers.0.weight``."""
    text, owner = "self", reference
    for part in target.split("."):
        if isinstance(owner, nn.ModuleDict | nn.ParameterDict):
            text += f"[{part!r}]"
        elif isinstance(owner, nn.ModuleList | nn.Sequential | nn.ParameterList) and part.isdigit():
            text += f"[{part}]"
        elif _plain_name(part) and hasattr(owner, part):
            text += f".{part}"
        else:
            raise CannotEmit(f"forward reads {target!r}, which the module does not have as such")
        owner = getattr(owner, part)  # containers keep their items as attributes too
    return text


def format_value(value: object, names: dict[Node, str]) -> str:
    if isinstance(value, Node):
        return names[value]
    if isinstance(value, tuple):
        items = [format_value(item, names) for item in value]
        return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
    if isinstance(value, list):
        return f"[{', '.join(format_value(item, names) for item in value)}]"
    if isinstance(value, dict):
        pairs = (f"{format_value(k, names)}: {format_value(v, names)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    if isinstance(value, slice):
        parts = (format_value(part, names) for part in (value.start, value.stop, value.step))
        return f"slice({', '.join(parts)})"
    if value is Ellipsis:
        return "..."
    if isinstance(value, float) and not math.isfinite(value):
        return "math.nan" if math.isnan(value) else ("math.inf" if value > 0 else "-math.inf")
    if value is None or isinstance(value, bool | int | float | str):
        return repr(value)
    if isinstance(value, torch.dtype | torch.memory_format | torch.layout):
        return str(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    raise CannotEmit(f"cannot write the constant {value!r} ({type(value).__name__}) as Python")


def _operand(text: str) -> str:
    return text if text.isidentifier() or text.replace(".", "").isdigit() else f"({text})"


def _plain_name(text: str) -> bool:
    return text.isidentifier() and not keyword.iskeyword(text) and not text.startswith("__")
