"""Captured targets frozen into configuration (``kernelpilot targets --write``): a
``[[tool.kernelpilot.targets]]`` entry per class, and one Python file of factories that build
what the capture saw (the constructor's arguments, inputs drawn like the ones seen).

Pure text: nothing here runs. The constructor's arguments come from the capture worker, which
ran the repository's code: the expression is accepted only as literals, names and calls of
names it imports (``GPTConfig(n_embd=768)``), and the imports only as ``from module import
Name`` from the repository's own files (never ``from os import system``).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

from harness.capture.records import CapturedTarget, TensorSpec

FACTORY_FILE = "kernelpilot_targets.py"
_SAFE_NODES = (
    ast.Expression, ast.List, ast.Tuple, ast.Dict, ast.Constant, ast.Name, ast.Load, ast.Call,
    ast.keyword, ast.UnaryOp, ast.USub,
)  # fmt: skip


def frozen(
    targets: list[CapturedTarget], factory_path: str, local: Callable[[str], bool]
) -> tuple[str, str]:
    """The TOML entries (``factory_path`` relative to the pyproject.toml) and the factory
    file's text, for the targets that were seen built and called. ``local(module)``: whether
    a dotted module name is a file of the repository (only those are imported from)."""
    imports: set[str] = set()
    functions: list[str] = []
    entries: list[str] = []
    for target in targets:
        if target.calls and not target.problem:
            entries.append(_entry(target, factory_path, functions, imports, local))
    if not entries:
        return "", ""
    header = (
        '"""Written by `kernelpilot targets --write` from what the repository\'s own code did\n'
        'when it built and called these modules; edit freely: pyproject.toml names these."""\n\n'
    )
    body = "import torch\n" + "".join(f"{line}\n" for line in sorted(imports))
    return "\n\n".join(entries) + "\n", header + body + "\n\n" + "\n\n".join(functions)


def _comment(text: str) -> str:
    """A TOML comment line of the worker's text: no line break of any kind can end it early
    and start a line of TOML of the pull request's own."""
    return "# " + " ".join(text.split())


def _entry(
    target: CapturedTarget,
    factory_path: str,
    functions: list[str],
    imports: set[str],
    local: Callable[[str], bool],
) -> str:
    stem = _function_stem(target)
    seen = _comment(
        f"seen in {target.source}" + (f", built at {target.built_at}" if target.built_at else "")
    )
    lines = [
        seen,
        "[[tool.kernelpilot.targets]]",
        f"module = {_toml(f'{target.path}:{target.class_name}')}",
    ]
    init = _init_expression(target, imports, local)
    if init is None:
        lines.append("# init = 'file.py:function' returning the constructor's arguments: the ones "
                     "seen could not be written out")  # fmt: skip
    elif init:
        functions.append(f"def {stem}_init():\n    return {init}\n")
        lines.append(f"init = {_toml(f'{factory_path}:{stem}_init')}")
    call = target.calls[0]
    drawn = ", ".join(
        tensor_source(arg.tensor) if arg.tensor is not None else repr(arg.value)
        for arg in [*call.args, *call.keywords.values()]
    )
    functions.append(f"def {stem}_inputs():\n    return [{drawn}]\n")
    lines.append(f"inputs = {_toml(f'{factory_path}:{stem}_inputs')}")
    if call.keywords:
        lines.append(f"keywords = {json.dumps(list(call.keywords))}")
    return "\n".join(lines)


def _init_expression(
    target: CapturedTarget, imports: set[str], local: Callable[[str], bool]
) -> str | None:
    """The constructor's arguments as a factory's return expression; "" for none at all;
    None where they could not be written out."""
    if target.init_file is None:
        args, kwargs = target.init_args or [], target.init_kwargs or {}
        if not args and not kwargs:
            return ""
        if args and kwargs:
            return None
        return repr(kwargs) if kwargs else repr(args)
    lines = [
        line for line in target.init_imports if IMPORT_LINE.match(line) and local(line.split()[1])
    ]
    expression = safe_expression(target.init_expression, {line.split()[-1] for line in lines})
    if expression is not None:
        imports.update(lines)
    return expression


def written_init(
    target: CapturedTarget, local: Callable[[str], bool]
) -> tuple[list[str], str] | None:
    """A captured constructor call as imports and an expression (config objects written out),
    for a follow-up's test; None where it cannot be written."""
    imports: set[str] = set()
    expression = _init_expression(target, imports, local)
    if not expression:
        return None
    return sorted(imports), expression


def safe_expression(text: str | None, names: set[str]) -> str | None:
    """``text`` where it is literals and calls of the imported ``names`` (``[GPTConfig(n_embd=8)]``)
    and nothing else: no attribute, no other name, no comprehension; None otherwise."""
    if not text:
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, _SAFE_NODES):
            return None
        if isinstance(node, ast.Name) and node.id not in names:
            return None
        if isinstance(node, ast.Call) and not isinstance(node.func, ast.Name):
            return None
    return ast.unparse(tree)


def tensor_source(spec: TensorSpec) -> str:
    """Python that draws a tensor like the one seen, by its spec's rule (``TensorSpec.drawing``,
    as ``harness.problem.cases.drawn_like``)."""
    shape = f"({', '.join(str(size) for size in spec.shape)}{',' if len(spec.shape) == 1 else ''})"
    rule = spec.drawing()
    if rule.kind == "bool":
        return f"torch.rand{shape} < 0.5"
    if rule.kind == "int":
        return f"torch.randint({int(rule.a)}, {int(rule.b)}, {shape}, dtype=torch.{spec.dtype})"
    base = "randn" if rule.kind == "normal" else "rand"
    drawn = f"torch.{base}{shape} * {rule.a:.4g} + {rule.b:.4g}"
    return drawn if spec.dtype == "float32" else f"({drawn}).to(torch.{spec.dtype})"


IMPORT_LINE = re.compile(r"^from [A-Za-z_][A-Za-z0-9_.]* import [A-Za-z_][A-Za-z0-9_]*$")


def _function_stem(target: CapturedTarget) -> str:
    path = re.sub(r"\W", "_", target.path.removesuffix(".py"))
    return f"{path}_{target.class_name}".lower()


def _toml(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)
