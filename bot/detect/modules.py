"""Which classes are ``nn.Module`` classes, read off the AST of the head commit only.

Nothing here imports the user's code: a class is a module when one of its bases names
``torch.nn.Module`` (or another class of ``torch.nn``) through whatever aliases the file's
imports bind, or names a class of the repository that is itself a module, in the same file or
in another one (``from .blocks import Base``). Which lines of a class changed is
``bot.detect.uses``; the imports, ``bot.detect.imports``.
"""

from __future__ import annotations

import ast

from bot.detect.imports import (
    Sources,
    import_bindings,
    module_file,
    star_imports,
    top_level_statements,
)

# Classes of torch.nn that are not modules: a subclass of these is a tensor, not a layer.
TORCH_NN_NON_MODULES = {"Parameter", "Buffer", "UninitializedParameter", "UninitializedBuffer"}
# Bases and re-exports followed from one name, at most: real code needs a handful, and a crafted
# chain of hundreds of files would otherwise end in a RecursionError.
MAX_HOPS = 50
ClassKey = tuple[str, str]  # (path, class name)


class ModuleIndex:
    """Answers "is this class an nn.Module subclass?" and "which class does this name mean?"
    across the repository, with memory.

    One index per head commit: results and import bindings are cached per file, and a cycle of
    bases or of re-exports (``A(B)``, ``B(A)`` across files), or a chain longer than MAX_HOPS,
    ends as "not a module" rather than recursing.
    """

    def __init__(self, sources: Sources) -> None:
        self._sources = sources
        self._bindings: dict[str, dict[str, str]] = {}
        self._stars: dict[str, list[str]] = {}
        self._classes: dict[str, frozenset[str]] = {}
        self._is_module: dict[ClassKey, bool] = {}

    def module_classes(
        self, path: str, tree: ast.Module, also: set[str] | frozenset[str] = frozenset()
    ) -> list[ast.ClassDef]:
        """The top-level classes of ``path`` that are nn.Module subclasses, and those named in
        ``also`` (configured as targets: the user says they are modules, whatever their base)."""
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        return [node for node in classes if node.name in also or self.is_module(path, node.name)]

    def is_module(
        self, path: str, class_name: str, _seen: frozenset[ClassKey] = frozenset()
    ) -> bool:
        key = (path, class_name)
        if key in _seen or len(_seen) > MAX_HOPS:
            return False
        if key not in self._is_module:
            self._is_module[key] = self._resolve_class(path, class_name, _seen | {key})
        return self._is_module[key]

    def locate(
        self, path: str, dotted: str, _seen: frozenset[ClassKey] = frozenset()
    ) -> ClassKey | str | None:
        """What ``dotted``, written at the top level of ``path``, names: the file and name of a
        repository class where it is defined (re-exports followed), the qualified name of a
        class outside the repository (``torch.nn.Module``), or None where it cannot be told."""
        tree = self._sources.parsed(path)
        if tree is None or len(_seen) > MAX_HOPS:
            return None
        head, *rest = dotted.split(".")
        if not rest and head in self._classes_of(path, tree):
            return (path, head)
        origin = self._bindings_of(path, tree).get(head)
        if origin is not None:
            return self._qualified(".".join([origin, *rest]), path, _seen)
        for module in self._stars_of(path, tree):  # ``from .layers import *``
            found = self._qualified(f"{module}.{dotted}", path, _seen)
            if isinstance(found, tuple):
                return found
        return None

    def _resolve_class(self, path: str, class_name: str, seen: frozenset[ClassKey]) -> bool:
        tree = self._sources.parsed(path)
        if tree is None:
            return False
        node = top_level_class(tree, class_name)
        if node is None:  # re-exported, e.g. ``from .blocks import Base`` in a package __init__
            return self._names_module(self.locate(path, class_name, seen), seen)
        return any(
            self._names_module(self.locate(path, name, seen), seen)
            for name in map(dotted_name, node.bases)
            if name is not None  # Generic[T], a call: nothing we can follow statically
        )

    def _names_module(self, found: ClassKey | str | None, seen: frozenset[ClassKey]) -> bool:
        if isinstance(found, str):
            return is_torch_module(found)
        return found is not None and self.is_module(*found, _seen=seen)

    def _qualified(
        self, qualified: str, from_path: str, seen: frozenset[ClassKey]
    ) -> ClassKey | str | None:
        if is_torch_module(qualified):
            return qualified
        parts = qualified.split(".")
        for split in range(len(parts) - 1, 0, -1):  # the longest prefix that is a repository file
            file = module_file(self._sources.exists, parts[:split], from_path)
            if file is not None:
                rest = parts[split:]
                key = (file, rest[0])
                if len(rest) != 1 or key in seen:
                    return None
                return self.locate(file, rest[0], seen | {key})
        return qualified

    def _bindings_of(self, path: str, tree: ast.Module) -> dict[str, str]:
        if path not in self._bindings:
            self._bindings[path] = import_bindings(path, tree)
        return self._bindings[path]

    def _classes_of(self, path: str, tree: ast.Module) -> frozenset[str]:
        if path not in self._classes:
            statements = top_level_statements(tree)
            self._classes[path] = frozenset(
                s.name for s in statements if isinstance(s, ast.ClassDef)
            )
        return self._classes[path]

    def _stars_of(self, path: str, tree: ast.Module) -> list[str]:
        if path not in self._stars:
            self._stars[path] = star_imports(path, tree)
        return self._stars[path]


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


def top_level_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for statement in top_level_statements(tree):
        if isinstance(statement, ast.ClassDef) and statement.name == name:
            return statement
    return None


def dotted_name(node: ast.expr) -> str | None:
    """``nn.Module`` -> "nn.Module"; anything but a chain of names and attributes -> None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])
