"""Classes of other files that a changed class changes: its subclasses, and the modules that
build it (``self.mlp = MLP(config)``), found through the import graph of the head commit.

A ``class GatedMLP(MLP)`` in another file runs MLP's code, and so does a model whose block
constructs one: both behave differently when MLP changes, though not one of their lines did. Only
the files that import the changed class's file (directly, through a package's re-export, or
through other files) are looked at, and a name counts only where it resolves to that very class
(``from model import MLP``, ``import model``, ``from .model import MLP``, ``from pkg.model import
MLP as M``); a class of the same name elsewhere does not. Subclasses and users of a class found
this way are found in turn; a cycle of imports or of classes ends where it started.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bot.detect.imports import ImportGraph, Sources
from bot.detect.modules import ClassKey, ModuleIndex, dotted_name

Relation = Literal["subclass", "user"]


@dataclass(frozen=True)
class RelatedChange:
    """A module class changed by a changed class it derives from or builds."""

    path: str
    class_name: str
    class_line: int
    relation: Relation
    reason: str


def related_changes(
    sources: Sources,
    index: ModuleIndex,
    graph: ImportGraph,
    changed: list[ClassKey],
    accepts: Callable[[str, str], bool],
) -> list[RelatedChange]:
    """The classes that ``changed`` change, beyond those already in it: subclasses first, then
    users, each in the order found (breadth first: the nearest first). ``accepts`` says whether
    a class can be a target at all (an nn.Module, or configured as one)."""
    known = set(changed)
    pending = deque(changed)
    found: list[RelatedChange] = []
    while pending:
        path, name = pending.popleft()
        for file in [path, *graph.importers(path)]:
            tree = sources.parsed(file)
            if tree is None:  # unparsable: reported where it is a changed file, skipped here
                continue
            for node in tree.body:
                if not isinstance(node, ast.ClassDef) or (file, node.name) in known:
                    continue
                relation = _relation(index, file, node, (path, name))
                if relation is None or not accepts(file, node.name):
                    continue
                known.add((file, node.name))
                pending.append((file, node.name))
                reason = (
                    f"base class {name} changed ({path})"
                    if relation == "subclass"
                    else f"uses {name} ({path}), which changed"
                )
                found.append(RelatedChange(file, node.name, node.lineno, relation, reason))
    return sorted(found, key=lambda change: change.relation != "subclass")


def _relation(
    index: ModuleIndex, path: str, node: ast.ClassDef, target: ClassKey
) -> Relation | None:
    """How the class ``node`` of ``path`` depends on ``target``: it derives from it, or it
    constructs it somewhere in its body (``self.mlp = MLP(config)``,
    ``nn.ModuleList(Block(c) for c in configs)``)."""
    for base in node.bases:
        name = dotted_name(base)
        if name is not None and index.locate(path, name) == target:
            return "subclass"
    for child in ast.walk(node):
        if isinstance(child, ast.Call):
            name = dotted_name(child.func)
            if name is not None and index.locate(path, name) == target:
                return "user"
    return None
