"""Which names a Python statement binds, read off its AST: one answer for the static checks
(state kept across calls, ``harness.static.python``) and the bot's change detection (the
top-level definitions a class uses, ``bot.detect.uses``)."""

from __future__ import annotations

import ast


def bound_names(statement: ast.stmt) -> list[str]:
    """The names an assignment or an import binds (``import a.b`` binds ``a``); none for other
    statements."""
    if isinstance(statement, ast.Assign):
        return [name for target in statement.targets for name in names(target)]
    if isinstance(statement, ast.AnnAssign | ast.AugAssign):
        return names(statement.target)
    if isinstance(statement, ast.Import | ast.ImportFrom):
        return [(alias.asname or alias.name).split(".")[0] for alias in statement.names]
    return []


def names(target: ast.expr) -> list[str]:
    """The plain names an assignment target binds, through tuples and lists (``a, [b, c] =``);
    an attribute or a subscript binds none."""
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, ast.Tuple | ast.List):
        return [name for element in target.elts for name in names(element)]
    return []
