"""Which of forward's arguments a trace takes as constants, and under what names.

The harness calls a module with its inputs, the last of them by keyword where a capture saw
them so (``bind_arguments``). A parameter left at a default of None (a mask, a cache, targets)
is fixed in every trace: a proxy is never None, so ``if mask is not None`` would take the other
branch. torch.fx writes a check for each fixed argument, which ``drop_fixed_checks`` removes:
the candidate's guards check the same values (``agents.offline.guards``) and run the original
forward where they differ, rather than raise.
"""

from __future__ import annotations

import inspect
import operator

import torch
import torch.nn as nn
from torch.fx import Graph, Node
from torch.fx._symbolic_trace import _assert_is_none


class NotFixable(Exception):
    """The forward's arguments cannot be fixed for a trace; the message says why."""


def bind_arguments(
    module: nn.Module, inputs: list, keywords: list[str]
) -> tuple[dict[str, object], dict[str, None]]:
    """Every parameter of forward with its value, in forward's order (``inputs``, the last
    ``len(keywords)`` of them passed by those names as the harness calls it, and the defaults
    of the parameters left out); and those left out at a default of None (a mask, a cache,
    targets), which every trace fixes: a proxy is never None, so ``if mask is not None`` would
    take the other branch."""
    signature = inspect.signature(module.forward)
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            raise NotFixable(f"forward takes variadic arguments ({parameter})")
    positional = inputs[: len(inputs) - len(keywords)]
    named = dict(zip(keywords, inputs[len(positional) :], strict=True))
    try:
        bound = signature.bind(*positional, **named)
    except TypeError as err:
        raise NotFixable(f"the inputs do not fit forward's parameters: {err}") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    return arguments, {
        name: None for name in arguments if name not in given and arguments[name] is None
    }


def drop_fixed_checks(graph: Graph, parameters: list[str], fixed: set[str]) -> None:
    """Remove the checks torch.fx writes for each fixed argument (``_assert_is_none(mask)``,
    ``torch._assert(flag == True)``): the candidate's guards check the same values and run
    the original forward where they differ, rather than raise. The placeholders, one per
    parameter in order, keep the parameters' own names (a tracer may rename a fixed one
    ``mask_1``), so that callers passing one by name still reach it."""
    placeholders = [node for node in graph.nodes if node.op == "placeholder"]
    if len(placeholders) != len(parameters):
        raise NotFixable(f"the trace made {len(placeholders)} inputs of {len(parameters)}")
    for node, name in zip(placeholders, parameters, strict=True):
        node.target = name
    held = {node for node in placeholders if node.target in fixed}
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is _assert_is_none and node.args[0] in held:
            graph.erase_node(node)
        elif node.target is torch._assert and _compares(node.args[0], held):
            comparison = node.args[0]
            graph.erase_node(node)
            if isinstance(comparison, Node) and not comparison.users:
                graph.erase_node(comparison)


def _compares(node: object, held: set[Node]) -> bool:
    """``node`` is torch.fx's ``argument == value`` for a fixed argument."""
    return (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target is operator.eq
        and node.args[0] in held
    )
