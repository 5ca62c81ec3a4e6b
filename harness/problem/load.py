"""Problems: find the reference module and what it is constructed and called with.

A problem is a KernelBench-format file (``Model``, ``get_inputs``, ``get_init_inputs``) or a
``path.py:ClassName`` target whose inputs come from ``[tool.kernelpilot]`` or from
KernelBench-style functions beside the class. Loading runs the user's own code, never candidate
code. Building the reference and drawing inputs for a seed is ``harness.problem.cases``.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import torch

from harness.config import (
    ProjectTargets,
    TableReader,
    TargetConfig,
    kernelpilot_table,
    project_targets,
)
from harness.errors import UserError
from harness.files import read_user_text
from harness.records import Problem

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def problem_from_target(
    target: str, device: str, dtype: str | None, read: TableReader = kernelpilot_table
) -> Problem:
    """Resolve a CLI target: ``file.py`` (KernelBench) or ``file.py:ClassName`` (configured in
    the nearest project at or above the file, its pyproject.toml read by ``read``)."""
    path_text, _, class_name = target.partition(":")
    if not path_text.strip():
        raise UserError(f"empty target {target!r}", fix=f"name a file: {TARGET_FORMS}")
    path = Path(path_text).resolve()
    _check_source(path, class_name or "Model")
    if not class_name:
        return _kernelbench_problem(path, device, dtype or "float32")
    project = project_targets(path.parent, read)
    if project is not None:
        root = project.pyproject.parent
        for entry in project.targets:
            entry_path, _, entry_class = entry.module.partition(":")
            if (root / entry_path).resolve() == path and entry_class == class_name:
                return problem_from_config(entry, root, device, dtype or project.dtype)
    if _defines(path, "get_inputs"):
        return _kernelbench_problem(path, device, dtype or "float32", class_name)
    raise UserError(
        f"no way to build inputs for {class_name}",
        where=f"{path}:{class_name}",
        fix=_missing_inputs_fix(path, class_name),
    )


def problem_from_config(entry: TargetConfig, root: Path, device: str, dtype: str) -> Problem:
    """Build the problem for one ``[[tool.kernelpilot.targets]]`` entry."""
    path_text, _, class_name = entry.module.partition(":")
    where = f"{root / 'pyproject.toml'}: tool.kernelpilot.targets module = {entry.module!r}"
    if not class_name:
        raise UserError(
            "target has no class name", where=where, fix="write it as 'file.py:ClassName'"
        )
    path = (root / path_text).resolve()
    if path.is_dir():
        raise UserError(
            f"{path} is a folder, not a Python file",
            where=where,
            fix="name the .py file that defines the class: module = 'path/to/file.py:ClassName'",
        )
    _check_source(path, class_name)
    inputs_path, inputs_fn, shapes = None, None, None
    if isinstance(entry.inputs, str):
        fn_path, _, inputs_fn = entry.inputs.partition(":")
        inputs_path = (root / fn_path).resolve()
        if not inputs_fn or not inputs_path.is_file() or not _defines(inputs_path, inputs_fn):
            raise UserError(
                f"input factory {entry.inputs!r} not found",
                where=where,
                fix="set inputs = 'path.py:function' naming a function that returns a list of tensors",
            )
    elif isinstance(entry.inputs, list):
        shapes = entry.inputs
    elif _defines(path, "get_inputs"):
        inputs_fn = "get_inputs"
    else:
        raise UserError(
            f"no way to build inputs for {class_name}",
            where=where,
            fix=_missing_inputs_fix(path, class_name),
        )
    init_path, init_fn = _init_factory(entry, root, path, where)
    return Problem(
        name=class_name,
        source_path=path,
        class_name=class_name,
        inputs_path=inputs_path,
        inputs_fn=inputs_fn,
        input_shapes=shapes,
        input_keywords=entry.keywords,
        init_fn=init_fn,
        init_path=init_path,
        init_args=entry.init_args,
        init_kwargs=entry.init_kwargs,
        search_paths=[root, path.parent],
        device=device,
        dtype=entry.dtype or dtype,
        atol=entry.atol,
        rtol=entry.rtol,
    )


def _init_factory(
    entry: TargetConfig, root: Path, path: Path, where: str
) -> tuple[Path | None, str | None]:
    """Where the constructor's arguments come from: the ``init`` factory, else init_args and
    init_kwargs, else a get_init_inputs() beside the class, else no arguments."""
    if entry.init is None:
        if not entry.init_args and not entry.init_kwargs and _defines(path, "get_init_inputs"):
            return None, "get_init_inputs"
        return None, None
    if entry.init_args or entry.init_kwargs:
        raise UserError(
            "both init and init_args/init_kwargs are set",
            where=where,
            fix="keep one: init = 'path.py:function' returning the arguments, or the arguments",
        )
    fn_path, _, fn_name = entry.init.partition(":")
    init_path = (root / fn_path).resolve()
    if not fn_name or not init_path.is_file() or not _defines(init_path, fn_name):
        raise UserError(
            f"init factory {entry.init!r} not found",
            where=where,
            fix="set init = 'path.py:function' naming a function (relative to pyproject.toml) "
            "that returns the constructor's arguments: a list, or a dict of keyword arguments",
        )
    return init_path, fn_name


def problems_from_project(project: ProjectTargets, device: str, dtype: str | None) -> list[Problem]:
    """Every target ``project`` configures, as a Problem."""
    pyproject = project.pyproject
    if not project.targets:
        raise UserError(
            "no targets configured",
            where=f"{pyproject}: [tool.kernelpilot]",
            fix="add a [[tool.kernelpilot.targets]] entry, or pass a target on the command line",
        )
    return [
        problem_from_config(entry, pyproject.parent, device, dtype or project.dtype)
        for entry in project.targets
    ]


def _kernelbench_problem(path: Path, device: str, dtype: str, class_name: str = "Model") -> Problem:
    if not _defines(path, "get_inputs"):
        raise UserError(
            "KernelBench-format file has no get_inputs()",
            where=str(path),
            fix="define get_inputs() returning the forward inputs, or name the class as "
            "file.py:ClassName and configure its inputs in [tool.kernelpilot]",
        )
    return Problem(
        name=path.stem if class_name == "Model" else class_name,
        source_path=path,
        class_name=class_name,
        init_fn="get_init_inputs" if _defines(path, "get_init_inputs") else None,
        search_paths=[path.parent],
        device=device,
        dtype=dtype,
    )


TARGET_FORMS = (
    "a .py file defining Model, get_inputs() and get_init_inputs() (KernelBench format), or "
    "path.py:ClassName for a class whose inputs [tool.kernelpilot] configures"
)


def _check_source(path: Path, class_name: str) -> None:
    if path.is_dir():
        raise UserError(
            f"{path} is a folder, not a Python file", fix=f"pass a file: {TARGET_FORMS}"
        )
    if not path.is_file():
        raise UserError(f"file not found: {path}", fix="check the path of the target")
    tree = _parse(path)
    classes = [node.name for node in tree.body if isinstance(node, ast.ClassDef)]
    if class_name not in classes:
        listed = ", ".join(classes) if classes else "none"
        raise UserError(
            f"class {class_name!r} not found (classes in the file: {listed})",
            where=str(path),
            fix="name an nn.Module class defined at the top level of the file, as file.py:ClassName",
        )


def _parse(path: Path) -> ast.Module:
    source = read_user_text(path, "Python file")
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as err:  # a NUL byte's has no line
        where = f"{path}:{err.lineno}" if err.lineno else str(path)
        raise UserError(
            f"syntax error: {err.msg}", where=where, fix="fix the Python syntax"
        ) from None


def _defines(path: Path, name: str) -> bool:
    return defines_function(_parse(path), name)


def defines_function(tree: ast.Module, name: str) -> bool:
    """A top-level ``def name`` in a parsed file: how a KernelBench-style ``get_inputs`` beside a
    class is recognized, here and by the bot's change detection (which parses a commit's blob)."""
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name
        for node in tree.body
    )


def target_toml(file: str, class_name: str, init_comment: str = "constructor arguments") -> str:
    """The ``[[tool.kernelpilot.targets]]`` lines for a module with no way to build inputs.

    One text for the CLI's error and the bot's PR comment, so both tell the user the same thing.
    ``file`` is relative to the pyproject.toml the lines go into; strings are TOML-escaped.
    """
    return "\n".join(
        [
            "[[tool.kernelpilot.targets]]",
            f"module = {_toml_string(f'{file}:{class_name}')}",
            f'init_args = []   # {init_comment}; or init = "file.py:function" returning them',
            f"inputs = {_toml_string(f'{file}:make_inputs')}   # write make_inputs() returning "
            "forward's inputs, or give shapes: [[8, 1024]]",
        ]
    )


def _toml_string(text: str) -> str:
    # A JSON string is a valid TOML basic string (same escapes); paths may hold quotes.
    return json.dumps(text, ensure_ascii=False)


def _missing_inputs_fix(path: Path, class_name: str) -> str:
    block = textwrap.indent(target_toml(path.name, class_name), "    ")
    return (
        f"add to pyproject.toml:\n{block}\n"
        "  or define get_inputs() (and get_init_inputs()) beside the class"
    )
