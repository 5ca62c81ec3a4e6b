"""Which ``nn.Module`` classes a change touches, read off the AST of the head commit only.

Nothing here imports the user's code: a class is a module when one of its bases names
``torch.nn.Module`` (or another class of ``torch.nn``) through whatever aliases the file's
imports bind, or names a class of the repository that is itself a module, in the same file or
in another one (``from .blocks import Base``). A class is changed when its own lines are, or
when a top-level function, class or constant that it uses (directly or through other top-level
definitions of the same file) is. Imports are not followed as helpers: reordering them would
otherwise flag every class of the file.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from harness.bindings import bound_names

# Classes of torch.nn that are not modules: a subclass of these is a tensor, not a layer.
TORCH_NN_NON_MODULES = {"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"}
# Import roots tried for an absolute import besides the importing file's own folder.
SOURCE_ROOTS = ("", "src")
_Key = tuple[str, str]  # (path, class name)


class Sources(Protocol):
    """The head commit's files, as the AST side needs them (``bot.detect.changes`` reads them with git)."""

    def exists(self, path: str) -> bool: ...

    def parsed(self, path: str) -> ast.Module | None:
        """The parsed file, or None when it is missing, binary, too large or not valid Python."""
        ...


@dataclass(frozen=True)
class ClassChange:
    """A module class whose lines, or whose helpers' lines, changed."""

    class_name: str
    class_line: int
    lines: list[int]
    reason: str


class ModuleIndex:
    """Answers "is this class an nn.Module subclass?" across the repository, with memory.

    One index per head commit: results and import bindings are cached per file, and a cycle of
    bases (``A(B)``, ``B(A)`` across files) ends as "not a module" rather than recursing.
    """

    def __init__(self, sources: Sources) -> None:
        self._sources = sources
        self._bindings: dict[str, dict[str, str]] = {}
        self._is_module: dict[tuple[str, str], bool] = {}

    def module_classes(
        self, path: str, tree: ast.Module, also: set[str] | frozenset[str] = frozenset()
    ) -> list[ast.ClassDef]:
        """The top-level classes of ``path`` that are nn.Module subclasses, and those named in
        ``also`` (configured as targets: the user says they are modules, whatever their base)."""
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        return [node for node in classes if node.name in also or self.is_module(path, node.name)]

    def is_module(self, path: str, class_name: str, _seen: frozenset[_Key] = frozenset()) -> bool:
        key = (path, class_name)
        if key in _seen:
            return False
        if key not in self._is_module:
            self._is_module[key] = self._resolve_class(path, class_name, _seen | {key})
        return self._is_module[key]

    def _resolve_class(self, path: str, class_name: str, seen: frozenset[_Key]) -> bool:
        tree = self._sources.parsed(path)
        if tree is None:
            return False
        node = _top_level_class(tree, class_name)
        if node is None:  # re-exported, e.g. ``from .blocks import Base`` in a package __init__
            origin = self._bindings_of(path, tree).get(class_name)
            return origin is not None and self._qualified_is_module(origin, path, seen)
        return any(self._base_is_module(base, path, tree, seen) for base in node.bases)

    def _base_is_module(
        self, base: ast.expr, path: str, tree: ast.Module, seen: frozenset[_Key]
    ) -> bool:
        dotted = _dotted(base)
        if dotted is None:  # Generic[T], a call: nothing we can follow statically
            return False
        head, *rest = dotted.split(".")
        if not rest and _top_level_class(tree, head) is not None:
            return self.is_module(path, head, seen)
        origin = self._bindings_of(path, tree).get(head)
        return origin is not None and self._qualified_is_module(
            ".".join([origin, *rest]), path, seen
        )

    def _qualified_is_module(self, qualified: str, from_path: str, seen: frozenset[_Key]) -> bool:
        if is_torch_module(qualified):
            return True
        parts = qualified.split(".")
        for split in range(len(parts) - 1, 0, -1):  # the longest prefix that is a repository file
            file = self._module_file(parts[:split], from_path)
            if file is not None:
                rest = parts[split:]
                return len(rest) == 1 and self.is_module(file, rest[0], seen)
        return False

    def _module_file(self, module: list[str], from_path: str) -> str | None:
        """The repository file an absolute module name refers to, as Python would find it when
        run from the repository root, from ``src/``, or from the importing file's folder."""
        for root in dict.fromkeys([posixpath.dirname(from_path), *SOURCE_ROOTS]):
            stem = posixpath.join(root, *module)
            for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
                if self._sources.exists(candidate):
                    return candidate
        return None

    def _bindings_of(self, path: str, tree: ast.Module) -> dict[str, str]:
        if path not in self._bindings:
            self._bindings[path] = import_bindings(path, tree)
        return self._bindings[path]


def is_torch_module(qualified: str) -> bool:
    """``torch.nn.Module``, ``torch.nn.Linear``, ``torch.nn.modules.conv.Conv2d``: a layer class
    of torch.nn (not ``torch.nn.functional.relu``, not ``torch.nn.Parameter``)."""
    parts = qualified.split(".")
    if parts[:2] != ["torch", "nn"] or len(parts) < 3:
        return False
    name = parts[-1]
    if not name[:1].isupper() or name in TORCH_NN_NON_MODULES:
        return False
    return len(parts) == 3 or parts[2] == "modules"


def import_bindings(path: str, tree: ast.Module) -> dict[str, str]:
    """Top-level names bound by imports, with the dotted name each refers to.

    ``import torch.nn as tnn`` binds tnn to torch.nn; ``from torch.nn import Module as M``
    binds M to torch.nn.Module; ``from .blocks import Base`` in pkg/model.py binds Base to
    pkg.blocks.Base (relative imports become names from the repository root).
    """
    bindings: dict[str, str] = {}
    for statement in top_level_statements(tree):
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    bindings[alias.asname] = alias.name
                else:  # ``import torch.nn`` binds torch
                    first = alias.name.split(".")[0]
                    bindings[first] = first
        elif isinstance(statement, ast.ImportFrom):
            module = _absolute_module(path, statement.module, statement.level)
            for alias in statement.names:
                if alias.name != "*":
                    bindings[alias.asname or alias.name] = ".".join(
                        filter(None, [module, alias.name])
                    )
    return bindings


def _absolute_module(path: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    package = posixpath.dirname(path).split("/") if posixpath.dirname(path) else []
    package = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*package, *([module] if module else [])])


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
        own = sorted(changed.intersection(_span(node)))
        if own:
            added = len(own) == len(_span(node))
            reason = "class added" if added else "class body changed"
            result.append(ClassChange(node.name, node.lineno, own, reason))
            continue
        uses = used_names(node) | (extra_uses or {}).get(node.name, set())
        helper, lines = _changed_helpers(node, uses, definitions, changed)
        if helper is not None:
            base_names = {_dotted(base) for base in node.bases}
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
            touched = changed.intersection(_span(statement))
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


def top_level_statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Module-level statements, including those under a top-level ``if``/``try``/``with``
    (``try: from apex import FusedNorm`` / ``if HAS_TRITON: def helper(): ...``)."""
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        statement = pending.pop(0)
        if isinstance(statement, ast.If | ast.With):
            pending[:0] = [*statement.body, *getattr(statement, "orelse", [])]
        elif isinstance(statement, ast.Try):
            handlers = [line for handler in statement.handlers for line in handler.body]
            pending[:0] = [*statement.body, *handlers, *statement.orelse, *statement.finalbody]
        else:
            yield statement


def used_names(node: ast.AST) -> set[str]:
    """Every plain name read or written inside ``node`` (a local that shadows a top-level name
    counts too: erring towards "changed" costs a run, erring the other way misses a change)."""
    return {child.id for child in ast.walk(node) if isinstance(child, ast.Name)}


def kernelbench_class(classes: list[ast.ClassDef]) -> str | None:
    """The class a file's ``get_inputs()`` builds inputs for: ``Model`` (KernelBench's name) if
    the file has it, else the file's only module class. Other module classes of such a file are
    its building blocks; their inputs are not ``get_inputs()``'s."""
    names = [node.name for node in classes]
    if "Model" in names:
        return "Model"
    return names[0] if len(names) == 1 else None


def init_signature(node: ast.ClassDef) -> str | None:
    """``Block.__init__(dim, hidden=...)``: what ``init_args`` must give, for the TOML hint."""
    init = next(
        (
            item
            for item in node.body
            if isinstance(item, ast.FunctionDef) and item.name == "__init__"
        ),
        None,
    )
    if init is None:
        return None
    arguments = init.args
    positional = [*arguments.posonlyargs, *arguments.args][1:]  # without self
    first_default = len(positional) - len(arguments.defaults)
    parts = [a.arg + ("=..." if i >= first_default else "") for i, a in enumerate(positional)]
    if arguments.vararg:
        parts.append(f"*{arguments.vararg.arg}")
    parts += [
        f"{a.arg}=..." if d else a.arg
        for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True)
    ]
    if arguments.kwarg:
        parts.append(f"**{arguments.kwarg.arg}")
    return f"{node.name}.__init__({', '.join(parts)})"


def _top_level_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for statement in top_level_statements(tree):
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            return statement
    return None


def _dotted(node: ast.expr) -> str | None:
    """``nn.Module`` -> "nn.Module"; anything but a chain of names and attributes -> None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _span(statement: ast.stmt) -> range:
    """A statement's lines, decorators included (a changed ``@torch.compile`` changes it)."""
    decorators = getattr(statement, "decorator_list", [])
    start = min([statement.lineno, *(decorator.lineno for decorator in decorators)])
    return range(start, (statement.end_lineno or statement.lineno) + 1)
