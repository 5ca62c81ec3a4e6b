"""What the static gate needs to know about state across calls, read off the AST.

A candidate's forward must not keep state between calls (a cache keyed by input, a call
counter). These helpers say whether an expression is a plain reference to shared state, and
whether a default argument (made once, at definition) is immutable. The rules themselves are in
``harness.static.python``; which names a statement binds is ``harness.bindings``, shared with
the bot's change detection.
"""

from __future__ import annotations

import ast


def root_name(node: ast.expr) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def is_reference_to(value: ast.expr, shared: set[str]) -> bool:
    """``value`` is a plain reference (no call) to a shared object or to self's state."""
    while isinstance(value, ast.Attribute | ast.Subscript):
        value = value.value
    return isinstance(value, ast.Name) and (value.id in shared or value.id == "self")


def defaults(arguments: ast.arguments) -> list[tuple[ast.arg, ast.expr]]:
    positional = [*arguments.posonlyargs, *arguments.args]
    with_default = positional[len(positional) - len(arguments.defaults) :]
    pairs = list(zip(with_default, arguments.defaults, strict=True))
    pairs += [
        (parameter, default)
        for parameter, default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
        if default is not None  # a keyword-only parameter without a default
    ]
    return pairs


def is_immutable_default(node: ast.expr) -> bool:
    """Constants, names and attribute chains (``torch.float32``), and tuples of them."""
    if isinstance(node, ast.Tuple):
        return all(is_immutable_default(element) for element in node.elts)
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name | ast.Attribute) and is_immutable_default(node.value)
    return isinstance(node, ast.Constant | ast.Name) or _is_constant_arithmetic(node)


def _is_constant_arithmetic(node: ast.expr) -> bool:
    """``-1``, ``2 ** -0.5``: arithmetic on constants only (no names: ``A + B`` may be a list)."""
    if isinstance(node, ast.UnaryOp):
        return _is_constant_arithmetic(node.operand)
    if isinstance(node, ast.BinOp):
        return _is_constant_arithmetic(node.left) and _is_constant_arithmetic(node.right)
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float | complex)
