"""What an attribute chain in a candidate names, resolved statically on the real objects.

For the static gate (``harness.static.python``): ``nn.utils`` is the module ``torch.nn.utils``. Lookups use
``inspect.getattr_static``, so no descriptor, property or module ``__getattr__`` runs, and the
only modules imported are those on the import allow-list.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import sys

from harness.static.python_rules import (
    ALLOWED_DECORATOR_CALLS,
    ALLOWED_IMPORTS,
    ALLOWED_MODULES,
    ESCAPE_ATTRIBUTES,
    FRAME_PREFIXES,
    TORCH_SUBMODULE_NAMES,
)

UNKNOWN = object()  # what an expression names when the gate cannot resolve it statically


def import_bindings(tree: ast.Module) -> tuple[dict[str, object], set[str]]:
    """Names bound by allowed imports, with the objects they name, and every other bound name.

    A name bound both ways (a parameter called ``torch``) is left out of the first: the gate
    cannot tell which object it names. Only modules on the import allow-list are imported.
    """
    found: dict[str, list[object]] = {}
    rebound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_IMPORTS:
                    rebound.add((alias.asname or alias.name).split(".")[0])
                elif alias.asname:
                    found.setdefault(alias.asname, []).append(_imported(alias.name))
                else:
                    root = alias.name.split(".")[0]
                    found.setdefault(root, []).append(_imported(root))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            allowed = not node.level and module in ALLOWED_IMPORTS and module != "__future__"
            for alias in node.names:
                name = alias.asname or alias.name
                value = static_attribute(_imported(module), alias.name) if allowed else UNKNOWN
                if value is UNKNOWN:
                    rebound.add(name)
                else:
                    found.setdefault(name, []).append(value)
        else:
            rebound.update(_binds(node))
    imported = {
        name: values[0]
        for name, values in found.items()
        if name not in rebound and all(value is values[0] for value in values)
    }
    return imported, rebound | (found.keys() - imported.keys())


def _binds(node: ast.AST) -> list[str]:
    """Names that ``node`` binds, other than by importing."""
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
        return [node.id]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
        return [node.name]
    if isinstance(node, ast.MatchMapping) and node.rest:
        return [node.rest]
    if isinstance(node, ast.Global | ast.Nonlocal):
        return list(node.names)
    return []


def _imported(module: str) -> object:
    """An allowed module, by name (the caller checked it is on the import allow-list)."""
    return importlib.import_module(module)


def static_attribute(owner: object, name: str) -> object:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return UNKNOWN


def module_reached(owner: object, name: str) -> str | None:
    """The module that ``owner.name`` is, by its dotted name; None when it is not a module.

    A package's submodule that is not loaded yet counts too: a module ``__getattr__`` (torch's
    lazy ``torch.onnx``) would import it. Found on the file system, not by importing it.
    """
    value = static_attribute(owner, name)
    if inspect.ismodule(value):
        return str(static_attribute(value, "__name__"))
    if value is UNKNOWN and inspect.ismodule(owner):
        path = static_attribute(owner, "__path__")
        if isinstance(path, list) and name in {info.name for info in pkgutil.iter_modules(path)}:
            return f"{static_attribute(owner, '__name__')}.{name}"
    return None


def is_allowed_module(owner: object, name: str, module: str) -> bool:
    """Is the module that ``owner.name`` reaches (see ``module_reached``) on the allowed list?

    By identity when it is loaded: an object that only calls itself ``torch.nn`` is not it.
    """
    value = static_attribute(owner, name)
    if module not in ALLOWED_MODULES:
        return False
    return value is UNKNOWN or sys.modules.get(module) is value


class Resolver:
    """Resolves a candidate's attribute chains, given the names its allowed imports bind.

    ``imported``: names bound only by allowed imports, with their objects; ``rebound``: names
    bound any other way (a parameter called ``torch`` names nothing the gate can know).
    """

    def __init__(self, imported: dict[str, object], rebound: set[str]) -> None:
        self.imported = imported
        self.rebound = rebound

    def escape(self, node: ast.Attribute) -> str:
        """Why ``node`` reaches around the import allow-list; empty when it does not."""
        name = node.attr
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            return ""  # self's own attribute, named as the candidate likes
        if name in ESCAPE_ATTRIBUTES:
            return f".{name}: {ESCAPE_ATTRIBUTES[name]}"
        if name.startswith(FRAME_PREFIXES):
            return f".{name}: reads interpreter frames, code objects or tracebacks"
        owner = self.resolve(node.value)
        module = None if owner is UNKNOWN else module_reached(owner, name)
        if module is not None and not is_allowed_module(owner, name, module):
            return f"{ast.unparse(node)} reaches the module {module} (not on the allowed list)"
        if module is None and name in TORCH_SUBMODULE_NAMES:
            if owner is UNKNOWN or static_attribute(owner, name) is UNKNOWN:
                return f".{name}: named like the module torch.{name} (reached around the imports)"
        return ""

    def resolve(self, node: ast.expr) -> object:
        """The real object an attribute chain rooted at an allowed import names, else UNKNOWN.

        Looked up with ``inspect.getattr_static``: nothing is called and nothing is imported.
        A chain through a module off the allowed list stops resolving (it is rejected there).
        """
        if isinstance(node, ast.Name):
            return self.imported.get(node.id, UNKNOWN)
        if not isinstance(node, ast.Attribute):
            return UNKNOWN
        owner = self.resolve(node.value)
        if owner is UNKNOWN:
            return UNKNOWN
        value = static_attribute(owner, node.attr)
        module = module_reached(owner, node.attr)
        if module is not None and not is_allowed_module(owner, node.attr, module):
            return UNKNOWN
        return value

    def is_allowed_decorator(self, decorator: ast.expr) -> bool:
        if isinstance(decorator, ast.Name):
            return decorator.id == "staticmethod" and "staticmethod" not in self.rebound
        return (
            isinstance(decorator, ast.Call)
            and not decorator.args
            and not decorator.keywords
            and any(self.resolve(decorator.func) is allowed for allowed in ALLOWED_DECORATOR_CALLS)
        )
