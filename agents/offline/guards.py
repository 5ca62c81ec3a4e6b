"""The conditions under which the traced graph is the module's forward, checked on every call.

A trace fixes more than the code: the values forward read (``self.n_embd`` as a split size,
``self.training``, a dropout's ``p``), the types of the submodules it traced through or
replaced, the lengths of the containers it walked, how many values it unpacked, and the inputs'
ranks, dtypes and device the kernels were written for. The candidate checks each of them, with
Python comparisons only (no device work), and runs the original forward where one does not
hold: built with another config, put in ``train()``, called on another rank or dtype. Every
check comes from ``TraceFacts`` (``agents.offline.trace``), none from a list of known names.

    guards = guards_for(traced, reference, device)
    guards.entry      # checked first: inputs, types, lengths, values read
    guards.after      # checked right after a value is made: an unpacked sequence's length
    guards.before     # checked before a kernel call: its outputs' broadcast shapes
"""

from __future__ import annotations

import math
import types
from dataclasses import dataclass, field

import torch
import torch.nn as nn
from torch.fx import Node

from agents.offline import conv_bias
from agents.offline.cxx_common import COMPUTED_IN_FLOAT
from agents.offline.emit import CannotEmit, attribute_path, format_value, qualified_name
from agents.offline.kernel import FusedKernel
from agents.offline.trace import TracedModule
from agents.offline.watch import Read

_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict, nn.ParameterList, nn.ParameterDict)
# COMPUTED_IN_FLOAT said without naming a 16-bit dtype (the static checks refuse that in a float32
# problem): the floating dtypes of those sizes, which are exactly those (tests check it).
FLOAT_SIZES = tuple(sorted({item.itemsize for item in COMPUTED_IN_FLOAT}))


class CannotGuard(Exception):
    """Something the trace fixed cannot be checked in the candidate; the message says what."""


@dataclass(frozen=True)
class Check:
    """One condition: ``template`` with ``{0}``, ``{1}``... standing for ``nodes``' names."""

    template: str
    nodes: tuple[Node, ...] = ()

    def text(self, names: dict[Node, str]) -> str:
        if not self.nodes:  # a literal in it may hold braces: {'a': 1}
            return self.template
        return self.template.format(*(names[node] for node in self.nodes))


@dataclass
class Guards:
    """Where each check goes in the written forward."""

    entry: list[Check] = field(default_factory=list)
    after: dict[Node, list[Check]] = field(default_factory=dict)
    before: dict[tuple[Node, ...], list[Check]] = field(default_factory=dict)
    names: set[str] = field(default_factory=set)  # the reference file's definitions named


def guards_for(traced: TracedModule, reference: nn.Module, device: str) -> Guards:
    guards = Guards()
    placeholders = [node for node in traced.graph_module.graph.nodes if node.op == "placeholder"]
    ranked = _input_checks(guards, placeholders, traced, device)
    _structure_checks(guards, traced, reference)
    for read in [*traced.facts.reads, *traced.facts.replaced_reads]:
        guards.entry.append(_value_check(read, reference, guards))
    for node, template in traced.facts.conditions:  # what a hinted trace took from a value
        where = guards.entry if node.op == "placeholder" else guards.after.setdefault(node, [])
        if Check(template, (node,)) not in where:
            where.append(Check(template, (node,)))
    for node, counts in traced.facts.unpacked.items():
        if node.graph is not traced.graph_module.graph or _shape_of(node) in ranked:
            continue  # x.size() of an input whose rank is checked already
        checks = [Check(f"len({{0}}) == {count}", (node,)) for count in sorted(counts)]
        if node.op == "placeholder":
            guards.entry += checks
        else:
            guards.after[node] = checks
    return guards


def add_broadcast_checks(guards: Guards, kernels: dict[tuple[Node, ...], FusedKernel]) -> None:
    """A kernel writes every output at the broadcast shape of all its inputs; the trace grouped
    an output with inputs it does not read only where its own shape was that shape too. Where
    that may change (another input's shape at run time), the kernel runs only if it still is.
    So does a row reduction: it reduces rows of that shape, which its source had when traced;
    and an input it reads one value a row of must still have one value a row."""
    for group, kernel in kernels.items():
        everything = [item.node for item in kernel.inputs]
        shaped = [output.node for output in kernel.outputs]
        if kernel.row is not None:
            shaped.append(kernel.row.node)
        for value in shaped:
            read = [node for node in everything if node in _cone(value, set(group))]
            if len(read) == len(everything):
                continue
            # {0}..{k-1}: the inputs the output reads; then the others (broadcasting commutes)
            check = Check(
                f"{_broadcast(range(len(read)))} == {_broadcast(range(len(everything)))}",
                (*read, *[node for node in everything if node not in read]),
            )
            checks = guards.before.setdefault(group, [])
            if check not in checks:
                checks.append(check)
        if kernel.row is not None:
            for item in kernel.inputs:
                if not item.contiguous_columns:
                    check = Check("({0}.dim() == 0 or {0}.shape[-1] == 1)", (item.node,))
                    guards.before.setdefault(group, []).append(check)


def _broadcast(indices: range) -> str:
    return f"torch.broadcast_shapes({', '.join(f'{{{index}}}.shape' for index in indices)})"


def _cone(node: Node, group: set[Node]) -> set[Node]:
    """The values ``node`` is computed from inside its group, and the group's inputs it reads."""
    seen: set[Node] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        for value in current.all_input_nodes:
            if value not in seen:
                seen.add(value)
                if value in group:
                    pending.append(value)
    return seen


def _input_checks(
    guards: Guards, placeholders: list[Node], traced: TracedModule, device: str
) -> set[Node]:
    """Tensor inputs: a tensor, of the traced rank, of a dtype the kernels compute as traced,
    on the kernels' device. An argument the graph holds as a constant (a None left out, a
    flag) keeps its value.
    Returns the placeholders whose rank is checked."""
    facts = traced.facts
    ranked: set[Node] = set()
    first_float: Node | None = None
    for node in placeholders:
        value = facts.arguments[str(node.target)]
        if str(node.target) in facts.fixed or value is None:  # None: its branches were taken
            guards.entry.append(_constant_check(node, value))
            continue
        if not isinstance(value, torch.Tensor):
            continue  # numbers and flags stay graph values: passed to the kernels, not fixed
        guards.entry += [
            Check("isinstance({0}, torch.Tensor)", (node,)),
            Check(f"{{0}}.dim() == {value.dim()}", (node,)),
            Check(f"{{0}}.is_{device}", (node,)),
        ]
        ranked.add(node)
        if value.dtype != traced.dtype:
            guards.entry.append(Check(f"{{0}}.dtype == {value.dtype}", (node,)))
        elif first_float is None:  # the kernels compute every float dtype they take alike
            first_float = node
            guards.entry.append(
                Check(
                    f"{{0}}.is_floating_point() and {{0}}.dtype.itemsize in {FLOAT_SIZES}", (node,)
                )
            )
        else:
            guards.entry.append(Check("{0}.dtype == {1}.dtype", (node, first_float)))
    return ranked


def _constant_check(node: Node, value: object) -> Check:
    """``value`` is a plain constant: None, a bool (by identity: ``1 == True``), a number, a
    string or a tuple of them; anything else the candidate cannot compare, so no candidate."""
    if value is None or isinstance(value, bool):
        return Check(f"{{0}} is {value}", (node,))
    try:
        literal = format_value(value, {})
    except CannotEmit as err:
        raise CannotGuard(f"the argument {node.target!r} is fixed by the trace: {err}") from None
    literal = literal.replace("{", "{{").replace("}", "}}")  # a template: {0} is the node
    return Check(f"type({{0}}) is type({literal}) and {{0}} == {literal}", (node,))


def _structure_checks(guards: Guards, traced: TracedModule, reference: nn.Module) -> None:
    """The containers walked keep their lengths (shortest paths first, so that an index is
    checked before it is used), then the modules traced through or replaced keep their types."""
    facts = traced.facts
    graph = traced.graph_module.graph
    used = [str(node.target) for node in graph.nodes if node.op in ("call_module", "get_attr")]
    read = [item.target for item in [*facts.reads, *facts.replaced_reads]]
    prefixes: set[str] = set()
    for path in [*used, *facts.inlined, *facts.replaced, *read]:
        parts = path.split(".")
        prefixes.update(".".join(parts[:end]) for end in range(1, len(parts)))
    owners = dict(reference.named_modules())
    for prefix in sorted(prefixes, key=lambda text: (text.count("."), text)):
        container = owners.get(prefix)
        if isinstance(container, _CONTAINERS):
            expression = _expression(reference, prefix)
            guards.entry.append(Check(f"len({expression}) == {len(container)}"))
    for path in sorted({*facts.inlined, *facts.replaced}, key=lambda text: text.count(".")):
        cls = type(reference.get_submodule(path))
        name = _name_of(cls, reference, guards)
        if name is None:
            raise CannotGuard(
                f"the graph traced through or replaced self.{path}, a "
                f"{cls.__module__}.{cls.__qualname__}: a class the candidate cannot name "
                "(only torch.nn's and the reference file's top-level classes)"
            )
        guards.entry.append(Check(f"type({_expression(reference, path)}) is {name}"))
    for path in facts.split_biases:
        guards.entry += [Check(text) for text in conv_bias.guards(_expression(reference, path))]


def _name_of(item: object, reference: nn.Module, guards: Guards) -> str | None:
    """How the candidate names a class or function: ``nn.GELU``, ``F.gelu``, or a top-level
    definition of the reference's file (its copy in the candidate, which the copied
    constructor uses): then ``guards.names`` asks for the copy."""
    name = getattr(item, "__name__", None)
    if not isinstance(name, str):
        return None
    if isinstance(item, type) and getattr(nn, name, None) is item:
        return f"nn.{name}"
    if not isinstance(item, type):
        try:
            return qualified_name(item)
        except CannotEmit:
            pass
    home = type(reference).__module__
    if getattr(item, "__module__", None) == home and getattr(item, "__qualname__", None) == name:
        guards.names.add(name)
        return name
    return None


def _value_check(read: Read, reference: nn.Module, guards: Guards) -> Check:
    expression = _expression(reference, read.target)
    value = read.value
    if value is None:
        return Check(f"{expression} is None")
    if isinstance(value, float) and math.isnan(value):
        return Check(f"math.isnan({expression})")
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType):
        name = _name_of(value, reference, guards)
        if name is None:
            raise CannotGuard(
                f"forward reads self.{read.target}, the function "
                f"{value.__module__}.{value.__qualname__}, which the candidate cannot name"
            )
        return Check(f"{expression} is {name}")
    try:
        return Check(f"{expression} == {format_value(value, {})}")
    except CannotEmit:
        raise CannotGuard(
            f"forward reads self.{read.target}, a {type(value).__name__}, which a guard "
            "cannot compare (plain numbers, strings, dtypes and their tuples only)"
        ) from None


def _expression(reference: nn.Module, target: str) -> str:
    try:
        return attribute_path(reference, target)
    except CannotEmit as err:
        raise CannotGuard(str(err)) from None


def _shape_of(node: Node) -> Node | None:
    """The tensor whose shape ``node`` is (``x.size()``, ``x.shape``), if it is one."""
    if node.op == "call_method" and node.target == "size" and len(node.args) == 1:
        value = node.args[0]
    elif node.op == "call_function" and node.target is getattr and node.args[1:] == ("shape",):
        value = node.args[0]
    else:
        return None
    return value if isinstance(value, Node) and not node.kwargs else None
