"""Which module classes of one file a diff touches: their own lines, or the lines of a top-level
function, class or constant of the same file that they use (directly or through other top-level
definitions). Imports are not followed as helpers: reordering them would otherwise flag every
class of the file; classes of other files are ``bot.detect.related``'s.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from bot.detect.imports import top_level_statements
from bot.detect.modules import dotted_name
from harness.bindings import bound_names


@dataclass(frozen=True)
class ClassChange:
    """A module class whose lines, or whose helpers' lines, changed."""

    class_name: str
    class_line: int
    lines: list[int]
    reason: str


def changed_classes(
    tree: ast.Module,
    classes: list[ast.ClassDef],
    changed: set[int],
    extra_uses: dict[str, set[str]] | None = None,
) -> list[ClassChange]:
    """The classes among ``classes`` whose own lines or helpers' lines are in ``changed``.

    ``extra_uses`` names what a class depends on without mentioning it: a KernelBench file's
    ``Model`` is measured on ``get_inputs()``, so new input shapes make it a new problem.
    """
    definitions = top_level_definitions(tree)
    result = []
    for node in classes:
        own = sorted(changed.intersection(span(node)))
        if own:
            added = len(own) == len(span(node))
            reason = "class added" if added else "class body changed"
            result.append(ClassChange(node.name, node.lineno, own, reason))
            continue
        uses = used_names(node) | (extra_uses or {}).get(node.name, set())
        helper, lines = _changed_helpers(node, uses, definitions, changed)
        if helper is not None:
            base_names = {dotted_name(base) for base in node.bases}
            kind = "base class" if helper in base_names else "helper"
            result.append(ClassChange(node.name, node.lineno, lines, f"{kind} {helper} changed"))
    return result


def _changed_helpers(
    node: ast.ClassDef, uses: set[str], definitions: dict[str, list[ast.stmt]], changed: set[int]
) -> tuple[str | None, list[int]]:
    """Follow the names a class uses through the file's top-level definitions, breadth first, so
    the reason names the nearest changed helper; the lines are those of every changed one."""
    first: str | None = None
    lines: set[int] = set()
    visited = {node.name}
    queue = sorted(uses)
    while queue:
        name = queue.pop(0)
        if name in visited or name not in definitions:
            continue
        visited.add(name)
        for statement in definitions[name]:
            touched = changed.intersection(span(statement))
            if touched:
                first = first or name
                lines |= touched
            queue.extend(sorted(used_names(statement) - visited))
    return first, sorted(lines)


def top_level_definitions(tree: ast.Module) -> dict[str, list[ast.stmt]]:
    """Top-level functions, classes and assignments by the names they bind (a name assigned
    twice, ``SCALE = 1`` then ``SCALE *= 2``, has both statements)."""
    definitions: dict[str, list[ast.stmt]] = {}
    for statement in top_level_statements(tree):
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions.setdefault(statement.name, []).append(statement)
        elif isinstance(statement, ast.Assign | ast.AnnAssign | ast.AugAssign):
            for name in bound_names(statement):
                definitions.setdefault(name, []).append(statement)
    return definitions


def used_names(node: ast.AST) -> set[str]:
    """Every plain name read or written inside ``node`` (a local that shadows a top-level name
    counts too: erring towards "changed" costs a run, erring the other way misses a change)."""
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def span(statement: ast.stmt) -> range:
    """A statement's lines, decorators included (a changed ``@torch.compile`` changes it)."""
    decorators = getattr(statement, "decorator_list", [])
    start = min([statement.lineno, *(decorator.lineno for decorator in decorators)])
    return range(start, (statement.end_lineno or statement.lineno) + 1)
