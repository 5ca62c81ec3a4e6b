"""Copy the reference class into ``ModelNew``: its constructor, so it has the same parameters,
and its forward, as ``_original_forward``, the path taken where the guards do not hold.

The candidate must construct with the reference's arguments and load its ``state_dict``
strictly, while the static gate rejects any mention of the reference class (so no subclassing,
no calls into it). The class is therefore rebuilt from the reference's source with the AST:
``__init__``, ``forward`` and the methods they call, annotations dropped, ``super(Model, self)``
made ``super()``, plus the module-level definitions those need (the submodules' classes with
their own forwards among them). Imports of ``torch``/``math`` names
become plain assignments (``Linear = nn.Linear``), the functions of einops stay imports (the
gate's ``LIBRARY_NAMES``); anything else the constructor needs from another package stops the
proposal, since a candidate may import nothing else.
"""

from __future__ import annotations

import ast
import builtins
import copy
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import torch.nn as nn

from agents.offline.copy_imports import MODULES, CannotCopy, import_binding
from agents.offline.emit import format_value
from harness.files import read_user_text

PROVIDED = {"torch", "nn", "F", "math", "load_inline"}
ORIGINAL_FORWARD = "_original_forward"


@dataclass(frozen=True)
class CopiedClass:
    prelude: str  # module-level definitions the class needs, in source order
    body: str  # the class body but forward, indented for ``class ModelNew(nn.Module):``
    original_call: str  # ``self._original_forward(x, mask)``: forward's arguments passed on


def copy_class(
    source_path: Path, class_name: str, reference: type, names: set[str] | None = None
) -> CopiedClass:
    """The class rebuilt, with the module-level definitions it needs and ``names`` besides."""
    if reference.__bases__ != (nn.Module,):
        bases = ", ".join(base.__name__ for base in reference.__bases__)
        raise CannotCopy(
            f"{class_name} derives from {bases}; only direct nn.Module subclasses "
            "can be rebuilt without importing the reference"
        )
    tree = ast.parse(read_user_text(source_path, "Python file"), filename=str(source_path))
    found = [
        node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name
    ]
    if not found or found[0].decorator_list:
        raise CannotCopy(f"{class_name} is not a plain top-level class of {source_path.name}")
    values = _globals(reference)
    kept = [_clean(node, class_name, values) for node in _class_members(found[0])]
    for node in kept:
        if any(isinstance(sub, ast.Name) and sub.id == class_name for sub in ast.walk(node)):
            raise CannotCopy(f"{class_name}'s constructor or forward refers to the class by name")
    forward = _rename_forward(kept, class_name)
    prelude = _module_dependencies(tree, kept, class_name, names or set(), values)
    body = "\n\n".join(ast.unparse(node) for node in kept)
    return CopiedClass(prelude, _indent(body), _call(forward))


def _globals(reference: type) -> dict[str, object]:
    """The reference file's globals as it ran: its module's, or its forward's."""
    module = sys.modules.get(reference.__module__)
    if module is not None and getattr(module, reference.__name__, None) is reference:
        return vars(module)
    forward = vars(reference).get("forward")
    return getattr(forward, "__globals__", {})


def _rename_forward(kept: list[ast.stmt], class_name: str) -> ast.FunctionDef:
    methods = {node.name: node for node in kept if isinstance(node, ast.FunctionDef)}
    if "forward" not in methods:
        raise CannotCopy(f"{class_name} defines no forward of its own")
    if ORIGINAL_FORWARD in methods:
        raise CannotCopy(f"{class_name} already has a method named {ORIGINAL_FORWARD}")
    methods["forward"].name = ORIGINAL_FORWARD
    return methods["forward"]


def _call(forward: ast.FunctionDef) -> str:
    """The original forward called with the arguments the written forward takes."""
    arguments = forward.args
    if arguments.vararg or arguments.kwarg:
        raise CannotCopy("forward takes *args or **kwargs")
    positional = [item.arg for item in [*arguments.posonlyargs, *arguments.args][1:]]
    keywords = [f"{item.arg}={item.arg}" for item in arguments.kwonlyargs]
    return f"self.{ORIGINAL_FORWARD}({', '.join([*positional, *keywords])})"


def _class_members(cls: ast.ClassDef) -> list[ast.stmt]:
    """Class-level assignments, ``__init__``, ``forward`` and the methods they call through
    ``self``."""
    methods = {
        node.name: node
        for node in cls.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    wanted: set[str] = set()
    pending: list[str] = [name for name in ("__init__", "forward") if name in methods]
    while pending:
        name = pending.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for sub in ast.walk(methods[name]):
            if (
                isinstance(sub, ast.Attribute)
                and isinstance(sub.value, ast.Name)
                and sub.value.id == "self"
                and sub.attr in methods
                and sub.attr != "forward"
            ):
                pending.append(sub.attr)
    return [
        node
        for node in cls.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        or (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in wanted)
    ]


def _clean(node: ast.stmt, class_name: str, values: dict[str, object]) -> ast.stmt:
    return _Cleaner(class_name, values).visit(copy.deepcopy(node))


class _Cleaner(ast.NodeTransformer):
    """Drop annotations, make ``super(Cls, self)`` plain ``super()``, and write a number read
    from another package (``np.inf``, ``np.pi``) as its value: a candidate imports only torch
    and math. ``values``: the reference file's globals."""

    def __init__(self, class_name: str, values: dict[str, object]) -> None:
        self.class_name = class_name
        self.values = values

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.value, ast.Name) or not isinstance(node.ctx, ast.Load):
            return node
        owner = self.values.get(node.value.id)
        if not isinstance(owner, types.ModuleType) or owner.__name__.split(".")[0] in MODULES:
            return node
        value = vars(owner).get(node.attr)
        if type(value) not in (int, float, bool):
            return node
        written = ast.parse(format_value(value, {}), mode="eval").body  # math.inf for inf
        return ast.copy_location(written, node)

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        """A base that is a class of torch.nn's, named by an alias (``from torch.nn import
        Module``, written ``Module = nn.Module`` here), is written ``nn.Module``: the gate
        resolves a class's bases through imports only. Which class it is comes from the class
        the file's run made, not from what the alias names at the end of the run."""
        self.generic_visit(node)
        made = self.values.get(node.name)
        bases = made.__bases__ if isinstance(made, type) else ()
        if len(bases) != len(node.bases):
            return node
        for index, (base, value) in enumerate(zip(node.bases, bases, strict=True)):
            if isinstance(base, ast.Name) and getattr(nn, value.__name__, None) is value:
                written = ast.Attribute(ast.Name("nn", ast.Load()), value.__name__, ast.Load())
                node.bases[index] = ast.copy_location(written, base)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args, node.keywords = [], []
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        node.returns = None
        if not node.body:
            node.body = [ast.Pass()]
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign(targets=[node.target], value=node.value), node)


def _module_dependencies(
    tree: ast.Module,
    kept: list[ast.stmt],
    class_name: str,
    names: set[str],
    values: dict[str, object],
) -> str:
    """The module-level statements the kept code needs, in source order. A name holding a plain
    constant when the reference file ran is written as that value (``SDPA_AVAILABLE = True``,
    bound in a ``try`` or under an ``if``); an import must bind what the file's run bound
    (the ``try`` body's, not its handler's)."""
    definitions = _module_definitions(tree)
    needed = set(names).union(*(_free_names(node) for node in kept))
    chosen: list[tuple[int, str]] = []
    seen: set[str] = set()
    while needed - seen:
        name = min(needed - seen)
        seen.add(name)
        if name == class_name:
            raise CannotCopy(f"the constructor's helpers refer to {class_name} by name")
        if name in PROVIDED or (name not in definitions and hasattr(builtins, name)):
            continue
        if _is_constant(value := values.get(name, ...)):  # as the reference file ran
            chosen.append((-1, f"{name} = {format_value(value, {})}"))
            continue
        if name not in definitions:
            raise CannotCopy(
                f"the class needs {name!r}, which is not defined at the top "
                "level of the reference file"
            )
        index, statement = definitions[name]
        if isinstance(statement, ast.Import | ast.ImportFrom):
            text, bound = import_binding(name, statement)
            if name in values and bound is not values[name]:
                raise CannotCopy(f"{name!r} was bound otherwise when the reference file ran")
            chosen.append((index, text))
            continue
        cleaned = _clean(statement, class_name, values)
        text = ast.unparse(cleaned)
        if (index, text) not in chosen:
            chosen.append((index, text))
            needed |= _free_names(cleaned)
    return "\n".join(text for _, text in sorted(chosen))


def _is_constant(value: object) -> TypeGuard[None | bool | int | float | str]:
    return value is None or type(value) in (bool, int, float, str)


def _module_definitions(tree: ast.Module) -> dict[str, tuple[int, ast.stmt]]:
    """Each name the file binds at its top level, with its statement and that statement's
    place; the body of a top-level ``try`` counts (``try: from torch.nn.functional import
    scaled_dot_product_attention``), its handlers do not."""
    definitions: dict[str, tuple[int, ast.stmt]] = {}
    statements = [
        (index, inner)
        for index, node in enumerate(tree.body)
        for inner in (node.body if isinstance(node, ast.Try) else [node])
    ]
    for index, node in statements:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            definitions[node.name] = (index, node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        definitions[sub.id] = (index, node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                definitions[(alias.asname or alias.name).split(".")[0]] = (index, node)
    return definitions


def _free_names(node: ast.AST) -> set[str]:
    """Names read in ``node`` and bound nowhere in it (an over-approximation of locals)."""
    loaded: set[str] = set()
    bound: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            (loaded if isinstance(sub.ctx, ast.Load) else bound).add(sub.id)
        elif isinstance(sub, ast.arg):
            bound.add(sub.arg)
        elif isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(sub.name)
        elif isinstance(sub, ast.alias):
            bound.add((sub.asname or sub.name).split(".")[0])
        elif isinstance(sub, ast.ExceptHandler) and sub.name:
            bound.add(sub.name)
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        bound.discard(node.name)  # a recursive helper still needs its own definition... once
        loaded.discard(node.name)
    return loaded - bound


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" if line else "" for line in text.splitlines())
