"""Changes that do not change behaviour: comments, docstrings and formatting.

Comments and formatting never reach the AST, so a file or a class whose base and head ASTs are
equal once docstrings are dropped behaves as before, and optimizing it again would only repeat
the last run. The comparison errs towards "changed": ``x * 1`` and ``x * 1.0`` differ (a
constant's type is kept), a statement that moved among others differs, and a class is only
judged unchanged when everything of its file that it could reach is equal too.
"""

from __future__ import annotations

import ast

from bot.detect.imports import import_bindings, star_imports
from bot.detect.uses import span, top_level_definitions, used_names

COSMETIC = "only comments, docstrings or formatting changed"
_DEFINITIONS = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.Import,
    ast.ImportFrom,
)
_Shape = object  # nested tuples of node types, fields and the reprs of leaves


def same_file(base: ast.Module, head: ast.Module) -> bool:
    """The whole file is equal in behaviour (a file nested past Python's recursion limit is
    taken as changed)."""
    base_body, head_body = _without_docstring(base), _without_docstring(head)
    return len(base_body) == len(head_body) and all(  # the first difference ends it
        _same([head_statement], [base_statement])
        for head_statement, base_statement in zip(head_body, base_body, strict=True)
    )


def behaviour_lines(base: ast.Module, head: ast.Module, changed: set[int]) -> set[int]:
    """The changed head lines left once the top-level definitions equal to base's (a comment
    inside a helper, a reformatted constant) are taken out: the lines that can change behaviour,
    so that a class is blamed on the helper that really changed."""
    base_definitions = top_level_definitions(base)
    kept = set(changed)
    for name, statements in top_level_definitions(head).items():
        touched = any(changed.intersection(span(statement)) for statement in statements)
        if touched and _same(statements, base_definitions.get(name, [])):
            for statement in statements:
                kept.difference_update(span(statement))
    return kept


def same_behaviour(
    path: str, base: ast.Module, head: ast.Module, class_name: str, extra_uses: set[str]
) -> bool:
    """The class behaves as in base: its own definition, every top-level definition and import
    binding it reaches by name, and the file's other top-level code (an ``if`` around
    definitions, a module-level call, a star import) are all equal. A deleted helper, a changed
    import or a changed condition around a definition therefore keep the class changed."""
    if not _same(_frame(base), _frame(head)):
        return False
    head_definitions, base_definitions = top_level_definitions(head), top_level_definitions(base)
    head_imports, base_imports = import_bindings(path, head), import_bindings(path, base)
    pending, seen = [class_name, *sorted(extra_uses)], set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        statements = head_definitions.get(name, [])
        if not _same(statements, base_definitions.get(name, [])):
            return False
        if head_imports.get(name) != base_imports.get(name):
            return False
        for statement in statements:
            pending.extend(used_names(statement) - seen)
    return star_imports(path, head) == star_imports(path, base)


def shape(node: object) -> _Shape:
    """A node as nested tuples with line numbers and docstrings left out; leaves as ``repr`` so
    that ``1``, ``1.0`` and ``True`` stay different."""
    if isinstance(node, ast.AST):
        fields = []
        for name, value in ast.iter_fields(node):
            if name == "body" and _has_docstring(node):
                value = value[1:]
            fields.append(shape(value))
        return (type(node).__name__, *fields)
    if isinstance(node, list):
        return tuple(shape(item) for item in node)
    return repr(node)


def _same(head: list[ast.stmt], base: list[ast.stmt]) -> bool:
    try:
        return [shape(statement) for statement in head] == [shape(statement) for statement in base]
    except RecursionError:
        return False


def _frame(tree: ast.Module) -> list[ast.stmt]:
    """The top-level statements that are not definitions or imports, in order, the module's
    docstring left out (whole: a changed definition inside an ``if`` changes the frame)."""
    return [s for s in _without_docstring(tree) if not isinstance(s, _DEFINITIONS)]


def _without_docstring(tree: ast.Module) -> list[ast.stmt]:
    return tree.body[1:] if _has_docstring(tree) else tree.body


def _has_docstring(node: ast.AST) -> bool:
    if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return False
    first = node.body[0] if node.body else None
    return (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    )
