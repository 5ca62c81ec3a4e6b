"""How the copied class (``agents.offline.init_copy``) binds a name the reference file imports:
a name of torch or math as an assignment (``Linear = nn.Linear``: the candidate's own imports
provide ``torch``, ``nn``, ``F`` and ``math``), a function or layer of einops as the import it was
(the static gate lets a candidate import those by name: ``LIBRARY_NAMES``); anything else
cannot be copied."""

from __future__ import annotations

import ast
import importlib
import math

import torch.nn as nn

from harness.static.python_rules import LIBRARY_NAMES

# The modules the candidate's own imports bind, by the name it binds each under.
MODULES = {"torch": "torch", "torch.nn": "nn", "torch.nn.functional": "F", "math": "math"}


class CannotCopy(Exception):
    """The constructor cannot be rebuilt without the reference class; the message says why."""


def import_binding(name: str, statement: ast.Import | ast.ImportFrom) -> tuple[str, object]:
    """The statement that binds ``name`` in the candidate, and what it binds: ``from einops
    import rearrange`` kept as written where the gate lets a candidate import that name
    (``LIBRARY_NAMES``), any other import rewritten as an assignment from torch or math."""
    module = getattr(statement, "module", None) or ""
    if isinstance(statement, ast.ImportFrom) and not statement.level and module in LIBRARY_NAMES:
        for alias in statement.names:
            if (alias.asname or alias.name) == name and alias.name in LIBRARY_NAMES[module]:
                renamed = f" as {name}" if name != alias.name else ""
                bound = getattr(importlib.import_module(module), alias.name, None)
                return f"from {module} import {alias.name}{renamed}", bound
    assignment = _import_assignment(name, statement)
    return assignment, _bound(assignment)


def _bound(assignment: str) -> object:
    """What ``name = torch.<path>`` (an import, rewritten) binds."""
    path = assignment.split(" = ", 1)[1].split(".")
    owner: object = {"nn": nn, "F": nn.functional, "math": math}.get(path[0])
    if owner is None:
        owner = importlib.import_module(path[0])
    for part in path[1:]:
        owner = getattr(owner, part, None)
    return owner


def _import_assignment(name: str, statement: ast.Import | ast.ImportFrom) -> str:
    for alias in statement.names:
        if (alias.asname or alias.name).split(".")[0] != name:
            continue
        if isinstance(statement, ast.Import):
            source = _module_expression(alias.name if alias.asname else name)
        elif statement.level == 0 and statement.module is not None:
            module = _module_expression(statement.module)
            source = f"{module}.{alias.name}" if module else None
        else:
            source = None
        if source is None:
            module = getattr(statement, "module", None) or alias.name
            raise CannotCopy(
                f"the class needs {name!r} from {module!r}; a candidate may import only "
                "torch and math, and the functions of einops"
            )
        return f"{name} = {source}"
    raise CannotCopy(f"{name!r} is not bound by its import statement")


def _module_expression(module: str) -> str | None:
    if module in MODULES:
        return MODULES[module]
    return module if module.startswith("torch.") else None
