"""Imports read statically: the names a file's imports bind, the repository files they name, and
the import graph of the head commit (which files import which).

Nothing is imported or run: a module name is looked up as a file of the head commit, the way
Python would find it when run from the repository root, from ``src/``, or from the importing
file's folder. Relative imports become names from the repository root.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Callable, Iterator
from typing import Protocol

# Import roots tried for an absolute import besides the importing file's own folder.
SOURCE_ROOTS = ("", "src")


class Sources(Protocol):
    """The head commit's files, as the AST side needs them (``bot.detect.head.HeadFiles`` reads
    them with git)."""

    def exists(self, path: str) -> bool: ...

    def parsed(self, path: str) -> ast.Module | None:
        """The parsed file, or None when it is missing, binary, too large or not valid Python."""
        ...

    def mentioning(self, word: str) -> list[str]:
        """The ``.py`` files whose text contains ``word``: the cheap cut before parsing."""
        ...


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
            module = absolute_module(path, statement.module, statement.level)
            for alias in statement.names:
                if alias.name != "*":
                    bindings[alias.asname or alias.name] = ".".join(
                        filter(None, [module, alias.name])
                    )
    return bindings


def star_imports(path: str, tree: ast.Module) -> list[str]:
    """The modules a file imports everything from at the top level (``from .layers import *``)."""
    return [
        absolute_module(path, statement.module, statement.level)
        for statement in top_level_statements(tree)
        if isinstance(statement, ast.ImportFrom)
        and any(alias.name == "*" for alias in statement.names)
    ]


def absolute_module(path: str, module: str | None, level: int) -> str:
    if level == 0:
        return module or ""
    package = posixpath.dirname(path).split("/") if posixpath.dirname(path) else []
    package = package[: len(package) - (level - 1)] if level > 1 else package
    return ".".join([*package, *([module] if module else [])])


def module_file(exists: Callable[[str], bool], module: list[str], from_path: str) -> str | None:
    """The repository file an absolute module name refers to, as Python would find it when run
    from the repository root, from ``src/``, or from the importing file's folder."""
    if not module or not all(module):
        return None
    for root in dict.fromkeys([posixpath.dirname(from_path), *SOURCE_ROOTS]):
        stem = posixpath.join(root, *module)
        for candidate in (f"{stem}.py", f"{stem}/__init__.py"):
            if exists(candidate):
                return candidate
    return None


def imported_files(path: str, tree: ast.Module, exists: Callable[[str], bool]) -> set[str]:
    """The repository files a file imports, anywhere in it (a test often imports inside its test
    functions): the file each import names, and for ``from pkg import name`` the submodule
    ``pkg/name.py`` where there is one. The packages above a named module, which Python also
    runs, are not counted: every file of a package would otherwise import every other."""
    found: set[str] = set()
    for node in _statements(tree):
        names: list[list[str]] = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = absolute_module(path, node.module, node.level)
            parts = module.split(".") if module else []
            names = [parts, *([*parts, alias.name] for alias in node.names if alias.name != "*")]
        for name in names:
            file = module_file(exists, name, path)
            if file is not None and file != path:
                found.add(file)
    return found


def _statements(tree: ast.Module) -> Iterator[ast.stmt]:
    """Every statement, however nested (in functions, classes, branches), without walking into
    expressions: imports are statements, and expressions are most of a file's nodes."""
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, ()):
                if isinstance(child, ast.stmt):
                    yield child
                pending.append(child)


class ImportGraph:
    """Which head files import which, built lazily: only the files whose text mentions a module's
    name are parsed to find its importers, so a large repository costs a text search, not a
    parse of every file."""

    def __init__(self, sources: Sources) -> None:
        self._sources = sources
        self._imports: dict[str, set[str]] = {}
        self._importers: dict[str, list[str]] = {}

    def imports_of(self, path: str) -> set[str]:
        """The repository files ``path`` imports directly (none where it does not parse)."""
        if path not in self._imports:
            tree = self._sources.parsed(path)
            self._imports[path] = (
                set() if tree is None else imported_files(path, tree, self._sources.exists)
            )
        return self._imports[path]

    def importers(self, path: str) -> list[str]:
        """The head files that import ``path``, directly or through other files, sorted.

        Zero-configuration targets will use this to pick the test files of a changed module:
        the tests that import it, however indirectly, are the code that already builds and calls
        it. A cycle of imports ends where it started; a file that does not parse imports
        nothing."""
        if path not in self._importers:
            self._importers[path] = self._search(path)
        return self._importers[path]

    def _search(self, path: str) -> list[str]:
        found: set[str] = set()
        pending = [path]
        while pending:
            imported = pending.pop()
            for candidate in self._candidates(imported):
                if candidate not in found and candidate != path:
                    if imported in self.imports_of(candidate):
                        found.add(candidate)
                        pending.append(candidate)
        return sorted(found)

    def _candidates(self, path: str) -> list[str]:
        """Files that could import ``path``: an import of it names its stem (its package's name
        for an ``__init__.py``), or is relative (``from . import name``)."""
        folder, name = posixpath.split(path)
        stem = posixpath.basename(folder) if name == "__init__.py" else name.removesuffix(".py")
        words = [stem] if stem else []
        if name == "__init__.py":
            words.append("from .")
        return sorted({file for word in words for file in self._sources.mentioning(word)})
