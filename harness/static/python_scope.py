"""The static gate's rules about state kept across calls (``harness.static.python``'s gate
derives from them): a candidate is called again and again with fresh inputs, and what it keeps
from one call to the next (a cache of outputs, a counter, a patched module) can return stale
answers that pass a check or outlive it.

Checked on the AST. Shared state is what outlives a call: module-level names and their aliases,
``self`` outside ``__init__``, a function's arguments where it keeps no state of its own.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

from harness.bindings import names
from harness.static.python_rules import MUTATORS
from harness.static.python_state import defaults, is_immutable_default, is_reference_to, root_name


class Scope(NamedTuple):
    """A function the gate's visit is in."""

    stateless: bool  # keeps no state across calls: any function but __init__
    aliases: set[str]  # its locals that name shared state
    parameters: set[str]  # its parameters but the method's own instance
    owner: str | None  # the name of the instance it is a method of (``self``), else None


class StateRules(ast.NodeVisitor):
    """The visit's state (the functions it is in, the module's names) and the rules that use it."""

    reasons: list[str]
    shared: set[str]  # module-level names: state shared across calls
    scopes: list[Scope]  # the functions the visit is in, innermost last
    methods: set[int]  # ids of the functions defined directly in a class

    def reject(self, node: ast.AST, why: str) -> None:
        self.reasons.append(f"line {getattr(node, 'lineno', '?')}: {why}")

    @property
    def stateless(self) -> bool:
        """Inside a function other than __init__: it must not keep state across calls."""
        return bool(self.scopes) and self.scopes[-1].stateless

    def _is_shared(self, name: str | None) -> bool:
        """May ``name`` hold an object that outlives the call: a module-level name, an alias
        of one, or (in a function that keeps no state) an argument, which is the caller's
        (``def f(cache, x): cache[0] = x`` called with a module-level dict)."""
        if name is None:
            return True
        if name == "self":
            return self.stateless
        scope = self.scopes[-1] if self.scopes else Scope(False, set(), set(), None)
        aliases, parameters = scope.aliases, scope.parameters
        local = bool(self.scopes) and name not in self.shared
        return name in aliases or not local or (self.stateless and name in parameters)

    def scope_of(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Scope:
        """The scope a function's body is visited in."""
        aliases = {
            name
            for statement in ast.walk(node)
            if isinstance(statement, ast.Assign) and is_reference_to(statement.value, self.shared)
            for target in statement.targets
            for name in names(target)
        } | {  # a default that names shared state is that state, under the parameter's name
            parameter.arg
            for parameter, default in defaults(node.args)
            if is_reference_to(default, self.shared)
        }
        positional = [*node.args.posonlyargs, *node.args.args]
        static = any(
            isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list
        )
        owner = (
            positional[0].arg if id(node) in self.methods and positional and not static else None
        )
        parameters = {item.arg for item in ast.walk(node.args) if isinstance(item, ast.arg)}
        return Scope(node.name != "__init__", aliases, parameters - {owner}, owner)

    def visit_Global(self, node: ast.AST) -> None:
        self.reject(node, "global/nonlocal state (state across calls)")

    visit_Nonlocal = visit_Global

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._check_defaults(node.args, "lambda")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target)

    def _check_defaults(self, arguments: ast.arguments, function: str) -> None:
        """A default is evaluated once, at definition: a mutable one keeps state across calls."""
        for parameter, default in defaults(arguments):
            if not is_immutable_default(default):
                self.reject(
                    default,
                    f"{function}: default {parameter.arg}={ast.unparse(default)} is made once and"
                    " kept across calls (state across calls; use None or a constant)",
                )

    def check_mutation(self, node: ast.Call) -> None:
        """A call that mutates state kept across calls (``cache.append(x)``,
        ``dict.update(shared, ...)``)."""
        func = node.func
        if (
            self.stateless
            and isinstance(func, ast.Attribute)
            and func.attr in MUTATORS
            and isinstance(func.value, ast.Name)
            and func.value.id in ("dict", "list", "set", "collections")
            and node.args
            and self._is_shared(root_name(node.args[0]))
        ):
            self.reject(node, f"mutates {ast.unparse(node.args[0])} (state across calls)")
        if self.stateless and isinstance(func, ast.Attribute) and func.attr in MUTATORS:
            if self._is_shared(root_name(func.value)):
                self.reject(node, f"mutates {ast.unparse(func.value)} (state across calls)")

    def _check_target(self, target: ast.expr) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._check_target(element)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value)
            return
        if isinstance(target, ast.Attribute | ast.Subscript):
            root = root_name(target)
            owner = self.scopes[-1].owner if self.scopes else None
            if isinstance(target, ast.Attribute) and (root is None or root != owner):
                # Only a method's own instance gets attributes: any other object may be a module,
                # a class or an object shared by the reference (``def f(m): m.gelu = ...;
                # f(F)``, ``type(x).relu = ...``).
                self.reject(
                    target,
                    f"sets {ast.unparse(target)}: only a method's own self may have attributes "
                    "set (monkeypatching or shared state)",
                )
            elif root == owner and root is not None and self.stateless:
                self.reject(
                    target, f"assigns {ast.unparse(target)} outside __init__ (state across calls)"
                )
            elif root != owner and self._is_shared(root):
                self.reject(
                    target, f"assigns to {ast.unparse(target)} (monkeypatching or shared state)"
                )
