"""Classes of other files that a changed class changes: its subclasses, and the modules that
use it (``self.mlp = MLP(config)``, or a default ``mlp_layer=MLP``), resolved through the imports
of the head commit.

A ``class GatedMLP(MLP)`` in another file runs MLP's code, and so does a block that constructs
one: both behave differently when MLP changes, though not one of their lines did. A use is any
mention in the class's body that resolves to the class (as a file's own helpers are followed by
any mention, ``bot.detect.uses``): erring towards "changed" costs a run, erring the other way
misses one. Only the files that name the class are looked at (its name, or a name a file
imports it under), and a name counts only where it resolves to that very class (``from model
import MLP``, ``import model``, ``from .model import MLP``, ``from pkg.model import MLP as M``,
a package's re-export, a star import); a class of the same name elsewhere does not.

Subclasses are followed transitively (a subclass of a subclass runs the changed code as its
own). Users are one level deep: the modules that use a changed class or one of its
subclasses. Following users of users would reach every model of a model zoo from one changed
layer (timm's ``Mlp`` is used by some fifty blocks, and those by their networks), each a whole
network to optimize for a change that its own block already shows.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from bot.detect.imports import Sources, import_bindings
from bot.detect.modules import ClassKey, ModuleIndex, dotted_name

Relation = Literal["subclass", "user"]


@dataclass(frozen=True)
class RelatedChange:
    """A module class changed by a changed class it derives from or uses."""

    path: str
    class_name: str
    class_line: int
    relation: Relation
    reason: str


@dataclass(frozen=True)
class _Dependencies:
    """The repository classes a class derives from and those it names in its body (builds,
    takes as a default layer, checks against), resolved once."""

    line: int
    bases: frozenset[ClassKey]
    uses: frozenset[ClassKey]


class _Related:
    def __init__(self, sources: Sources, index: ModuleIndex) -> None:
        self._sources, self._index = sources, index
        self._dependencies: dict[str, dict[str, _Dependencies]] = {}
        self._naming: dict[ClassKey, list[str]] = {}

    def dependents(self, target: ClassKey, relation: Relation) -> list[tuple[ClassKey, int]]:
        """The classes that derive from (``subclass``) or use (``user``) ``target``, in the
        files that could name it, in path order."""
        found = []
        for path in self._files_naming(target):
            for name, depends in self._classes(path).items():
                if target in (depends.bases if relation == "subclass" else depends.uses):
                    found.append(((path, name), depends.line))
        return found

    def _files_naming(self, target: ClassKey) -> list[str]:
        """The files whose text mentions the class's name or a name it is imported under
        elsewhere (``from .model import MLP as FeedForward`` in a package's ``__init__.py``):
        a file that names the class in any import form mentions one of them."""
        if target not in self._naming:
            words, files, done = [target[1]], {target[0]}, set()
            while words:
                word = words.pop()
                done.add(word)
                for path in self._sources.mentioning(word):
                    files.add(path)
                    aliases = self._aliases(path, target, word)
                    words += [alias for alias in aliases if alias not in done]
            self._naming[target] = sorted(files)
        return self._naming[target]

    def _aliases(self, path: str, target: ClassKey, word: str) -> list[str]:
        """The names ``path`` imports ``target`` under, other than ``word`` itself."""
        tree = self._sources.parsed(path)
        bindings = {} if tree is None else import_bindings(path, tree)
        return [
            name
            for name, origin in bindings.items()
            if name != word
            and origin.rsplit(".", 1)[-1] == word
            and self._index.locate(path, name) == target
        ]

    def _classes(self, path: str) -> dict[str, _Dependencies]:
        if path not in self._dependencies:
            tree = self._sources.parsed(path)  # None: unparsable, skipped here
            nodes = [] if tree is None else [n for n in tree.body if isinstance(n, ast.ClassDef)]
            self._dependencies[path] = {node.name: self._resolve(path, node) for node in nodes}
        return self._dependencies[path]

    def _resolve(self, path: str, node: ast.ClassDef) -> _Dependencies:
        body = [*node.body, *node.decorator_list, *node.keywords]
        named = {
            dotted_name(child)
            for part in body
            for child in ast.walk(part)
            if isinstance(child, ast.Name | ast.Attribute)
        }
        return _Dependencies(
            node.lineno, self._keys(path, map(dotted_name, node.bases)), self._keys(path, named)
        )

    def _keys(self, path: str, names: Iterable[str | None]) -> frozenset[ClassKey]:
        located = (self._index.locate(path, name) for name in names if isinstance(name, str))
        return frozenset(key for key in located if isinstance(key, tuple))


def related_changes(
    sources: Sources,
    index: ModuleIndex,
    changed: list[ClassKey],
    accepts: Callable[[str, str], bool],
) -> list[RelatedChange]:
    """The classes that ``changed`` change, beyond those already in it: subclasses (nearest
    first), then the users of the changed classes and of those subclasses. ``accepts`` says
    whether a class can be a target at all (an nn.Module, or configured as one)."""
    related = _Related(sources, index)
    known = set(changed)
    found: list[RelatedChange] = []
    pending = list(changed)
    while pending:  # subclasses, breadth first; a cycle of bases ends at known classes
        target = pending.pop(0)
        for key, line in related.dependents(target, "subclass"):
            if key not in known and accepts(*key):
                known.add(key)
                pending.append(key)
                reason = f"base class {target[1]} changed ({target[0]})"
                found.append(RelatedChange(*key, line, "subclass", reason))
    for target in [*changed, *((change.path, change.class_name) for change in found)]:
        for key, line in related.dependents(target, "user"):
            if key not in known and accepts(*key):
                known.add(key)
                reason = f"uses {target[1]} ({target[0]}), which changed"
                found.append(RelatedChange(*key, line, "user", reason))
    return found
