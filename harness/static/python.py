"""The static gate: reasons to reject a candidate's Python before any of its code runs.

Checked on the AST (never regexes over text); each rejection names the rule and the line.
Kernel sources are checked by ``harness.static.native`` when ``load_inline`` is called, and the
built library by ``harness.static.symbols``.
"""

from __future__ import annotations

import ast
import importlib

import torch
from torch.nn.modules.lazy import LazyModuleMixin

from harness.bindings import bound_names
from harness.static.python_names import Resolver, import_bindings, module_reached
from harness.static.python_rules import (
    ALLOWED_IMPORTS,
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_CALLS,
    LIBRARY_NAMES,
    LOW_PRECISION_PY,
    MODULE_METHODS,
    STDLIB_MODULES,
    forbidden_name,
)
from harness.static.python_scope import Scope, StateRules
from harness.static.python_state import root_name


class GateRejection(Exception):
    """Raised by the checks below; carries the human-readable reasons."""

    def __init__(self, reasons: list[str]) -> None:
        self.reasons = reasons
        super().__init__("; ".join(reasons))


def check_python(source: str, reference_class: str, dtype: str) -> list[str]:
    """Reasons to reject a candidate's Python source; empty when it passes."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return [f"line {err.lineno}: syntax error: {err.msg}"]
    visitor = _Gate(reference_class, low_precision_allowed=dtype != "float32")
    visitor.visit(tree)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    if "ModelNew" not in classes:
        visitor.reasons.insert(0, "defines no top-level class ModelNew")
    elif not _defines_forward(classes["ModelNew"], classes):
        model = classes["ModelNew"]
        visitor.reasons.insert(
            0,
            f"line {model.lineno}: ModelNew defines no forward (nor does a class of this file "
            "it derives from): nn.Module's own forward raises at the first call",
        )
    return visitor.reasons


def _defines_forward(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    """``cls`` or a class of the file it derives from (by name) has a ``def forward``."""
    seen: set[str] = set()
    pending = [cls]
    while pending:
        current = pending.pop()
        seen.add(current.name)
        if any(
            isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "forward"
            for item in current.body
        ):
            return True
        pending += [
            classes[base.id]
            for base in current.bases
            if isinstance(base, ast.Name) and base.id in classes and base.id not in seen
        ]
    return False


class _Gate(StateRules):
    """Every rule of the gate; those about state kept across calls are ``StateRules``."""

    def __init__(self, reference_class: str, low_precision_allowed: bool) -> None:
        self.reference_class = reference_class
        self.low_precision_allowed = low_precision_allowed
        self.reasons: list[str] = []
        self.shared: set[str] = set()  # module-level names: state shared across calls
        self.scopes: list[Scope] = []  # the functions the visit is in, innermost last
        self.methods: set[int] = set()  # ids of the functions defined directly in a class
        self.resolver = Resolver({}, set())  # what attribute chains from imports name

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            for target in bound_names(statement):
                self.shared.add(target)
        self.resolver = Resolver(*import_bindings(node))
        self.generic_visit(node)

    def _check_alias(self, node: ast.AST, alias: ast.alias) -> None:
        """An import binds its alias as an assignment would (``from typing import cast as
        load_state_dict`` in a class body redefines a method the harness calls)."""
        bound = alias.asname or alias.name.split(".")[0]
        if bound == "self" or _is_dunder(bound):
            self.reject(node, f"imports {alias.name} as {bound}")

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_alias(node, alias)
            if alias.name in LIBRARY_NAMES:
                self.reject(node, f"imports {alias.name} whole ({_library_names(alias.name)})")
            elif alias.name not in ALLOWED_IMPORTS:
                self.reject(
                    node, f"imports {alias.name} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})"
                )

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            self._check_alias(node, alias)
        if not node.level and module in LIBRARY_NAMES:
            for alias in node.names:
                if alias.name not in LIBRARY_NAMES[module]:
                    self.reject(node, f"imports {module}.{alias.name} ({_library_names(module)})")
            return
        if node.level or module not in ALLOWED_IMPORTS:
            self.reject(
                node,
                f"imports from {module or '.'} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})",
            )
        for alias in node.names:
            name, full = alias.name, f"{module}.{alias.name}"
            if full in ALLOWED_IMPORTS:
                continue
            if not _is_plain_name(name) or name in ("load", "load_library"):
                self.reject(node, f"imports {full}")
            elif name in STDLIB_MODULES or (module in ALLOWED_IMPORTS and _is_module(module, name)):
                # torch re-exports modules it imported: `from torch import sys` is `import sys`.
                self.reject(node, f"imports the module {full} (allowed: see imports)")
            elif why := forbidden_name(name):
                self.reject(node, f"imports {full}: {why}")
        self.generic_visit(node)

    def visit_Try(self, node: ast.AST) -> None:
        self.reject(node, "try/except: a fallback path can hide a failing kernel")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def _is_layer(self, base: ast.expr) -> bool:
        """nn.Module, or a layer torch.nn defines (real code derives ``LayerNorm(nn.LayerNorm)``
        to cast its input), each as the imports name it: nothing a plain module could not do,
        never a tensor subclass, an autograd function, a wrapper from elsewhere in torch, or a
        lazy layer (its hooks run candidate methods at load_state_dict, outside forward)."""
        value = self.resolver.resolve(base)
        if value is torch.nn.Module:
            return True
        return (
            isinstance(value, type)
            and issubclass(value, torch.nn.Module)
            and value.__module__.startswith("torch.nn.modules.")
            and not issubclass(value, LazyModuleMixin)
        )

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            if not self._is_layer(base):
                self.reject(
                    node,
                    f"class {node.name} derives from {ast.unparse(base)}; only nn.Module and "
                    "torch.nn's layers (nn.LayerNorm, nn.Linear...) are allowed",
                )
        for keyword in node.keywords:
            self.reject(node, f"class {node.name} sets {keyword.arg}= (metaclass tricks)")
        for item in node.body:
            for name in {getattr(item, "name", None), *bound_names(item)} - {None}:
                if name in MODULE_METHODS:
                    self.reject(
                        item, f"{node.name} redefines nn.Module.{name}, which the harness calls"
                    )
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                self.methods.add(id(item))
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.reject(node, f"defines {node.name} (tensor subclass or lazy object)")
        if node.name in ("__eq__", "__bool__", "__getattr__", "__getattribute__", "__del__"):
            self.reject(node, f"defines {node.name} (objects that act inside the comparison)")
        self._check_annotation(node.returns)
        for decorator in node.decorator_list:
            if not self.resolver.is_allowed_decorator(decorator):
                self.reject(decorator, f"decorates {node.name}: decorators can wrap forward")
        self._check_defaults(node.args, node.name)
        self.scopes.append(self.scope_of(node))
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Call(self, node: ast.Call) -> None:
        self._check_call(node)
        # load_inline is the harness's loader in the worker: call it, nothing else.
        if _is_load_inline(node.func):
            for child in [*node.args, *(k.value for k in node.keywords)]:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "self" and not isinstance(node.ctx, ast.Load):
            self.reject(node, "binds the name self other than as a method's first parameter")
        if node.id == "load_inline":
            self.reject(node, "uses load_inline other than by calling it")
        if node.id == self.reference_class:
            self.reject(node, f"uses the reference class {self.reference_class}")
        if node.id in FORBIDDEN_CALLS or node.id in ("__builtins__", "__loader__", "__spec__"):
            self.reject(node, f"uses {node.id}()")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = node.attr
        if name == "load_inline":
            self.reject(node, "uses load_inline other than by calling it")
        if _is_dunder(name) and (name != "__init__" or not self._is_base_init(node.value)):
            self.reject(node, f"accesses {name}")
        elif name in FORBIDDEN_ATTRIBUTES and FORBIDDEN_ATTRIBUTES[name]:
            self.reject(node, f".{name}: {FORBIDDEN_ATTRIBUTES[name]}")
        elif name in STDLIB_MODULES:
            self.reject(node, f".{name}: reaches the {name} module through an attribute")
        elif "hook" in name and ("state_dict" in name or "load" in name):  # self's own too
            self.reject(node, f".{name}: registers a hook that runs at load, outside any call")
        elif name.startswith("_") and not name.endswith("__") and root_name(node) != "self":
            self.reject(node, f".{name}: private internals (only self's own may be used)")
        elif root_name(node) != "self" and (why := forbidden_name(name)):
            self.reject(node, f".{name}: {why}")
        elif "tf32" in name.lower() or "reduced_precision" in name.lower():
            self.reject(node, f".{name}: lowers precision")
        elif not self.low_precision_allowed and name in LOW_PRECISION_PY:
            self.reject(node, f".{name}: reduced precision in a float32 problem")
        elif why := self.resolver.escape(node):
            self.reject(node, why)
        if name == self.reference_class:
            self.reject(node, f"uses the reference class {self.reference_class}")
        self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> None:
        if node.arg is not None and _is_dunder(node.arg):
            self.reject(node, f"passes {node.arg}= (a special method smuggled in by keyword)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        # A candidate never needs a dunder name as a string: as a dict key or a type() namespace
        # entry it defines a special method without a `def` the gate would see.
        if isinstance(node.value, str) and _is_dunder(node.value):
            self.reject(node, f"the string {node.value!r} names a special method or attribute")

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target)
        self._check_annotation(node.annotation)
        self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> None:
        self._check_annotation(node.annotation)
        self.generic_visit(node)

    def _check_annotation(self, annotation: ast.expr | None) -> None:
        """A string annotation is code that typing can evaluate: allow only dotted names."""
        for node in ast.walk(annotation) if annotation is not None else []:
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if not all(part.isidentifier() for part in node.value.split(".")):
                    self.reject(
                        node, "string annotation that is not a plain name (code in a type hint)"
                    )

    def _check_call(self, node: ast.Call) -> None:
        self.check_mutation(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "to" and not self.low_precision_allowed:
            for arg in [*node.args, *[k.value for k in node.keywords]]:
                if isinstance(arg, ast.Attribute) and arg.attr in LOW_PRECISION_PY:
                    self.reject(node, "casts to reduced precision in a float32 problem")

    def _is_base_init(self, owner: ast.expr) -> bool:
        """``super().__init__`` or a torch.nn class's (``nn.Module.__init__(self)``): a
        constructor run again on any other object resets its state (einops' layers keep what
        they were built with), state kept across calls."""
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name):
            return owner.func.id == "super"
        return self._is_layer(owner)


def _library_names(module: str) -> str:
    return f"from {module} import {', '.join(sorted(LIBRARY_NAMES[module]))} only"


def _is_plain_name(name: str) -> bool:
    return name.isidentifier() and not name.startswith("_")


def _is_module(package: str, name: str) -> bool:
    """Is ``package.name`` a module (``from torch import sys`` imports the sys module)?

    Only for packages on the import allow-list: the gate never imports candidate-named code.
    """
    return module_reached(importlib.import_module(package), name) is not None


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _is_load_inline(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "load_inline") or (
        isinstance(func, ast.Attribute) and func.attr == "load_inline"
    )
