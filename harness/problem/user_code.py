"""The user's own code, run inside a worker: their file imported, their class found, their
factories called (the constructor's arguments, the forward's inputs). What it raises is the
user's to fix, and the error quotes it: the exception, and the line of their file it came from.

Finding a problem (no user code run) is ``harness.problem.load``; drawing a case from a seed,
``harness.problem.cases``.
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
import types
from pathlib import Path

import torch

from harness.errors import UserError
from harness.records import Problem
from harness.sandbox.memory import is_out_of_memory, ran_out


def package_name(path: Path, stop: set[Path]) -> tuple[str, Path]:
    """The name a file is imported by in its repository, and the folder that name starts in:
    the packages above it (folders with ``__init__.py``, up to a folder in ``stop``), so that
    its relative imports (``from .decoding import decode``) resolve as they do there."""
    parts = [path.stem]
    folder = path.parent
    while folder not in stop and folder != folder.parent and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    return ".".join(parts), folder


def import_source(path: Path, search_paths: list[Path]) -> types.ModuleType:
    """Import a user file: as a module of its package where it is in one (by its dotted name,
    so relative imports work), else by path; errors become UserErrors naming the file."""
    for folder in reversed(search_paths):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    if (path.parent / "__init__.py").is_file():
        return _import_in_package(path, search_paths)
    module_name = f"kp_user_{abs(hash(str(path)))}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"cannot import {path}", fix="name a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise UserError(
            f"importing the file raised {type(err).__name__}: {err}{raised_at(err)}",
            where=str(path),
            fix="make the file importable on its own (python -c 'import runpy; runpy.run_path(...)')",
        ) from err
    return module


def _import_in_package(path: Path, search_paths: list[Path]) -> types.ModuleType:
    name, folder = package_name(path, set())
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module(name)
    except Exception as err:
        raise UserError(
            f"importing {name} raised {type(err).__name__}: {err}{raised_at(err)}",
            where=str(path),
            fix=f"make {name} importable from {folder} (python -c 'import {name}')",
        ) from err
    if Path(module.__file__ or "").resolve() != path.resolve():
        raise UserError(
            f"importing {name} gave {module.__file__}, not this file",
            where=str(path),
            fix="rename the module or the package that shadows it",
        )
    return module


def reference_class(problem: Problem) -> type[torch.nn.Module]:
    module = import_source(problem.source_path, problem.search_paths)
    cls = getattr(module, problem.class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
        raise UserError(
            f"{problem.class_name} is not an nn.Module subclass",
            where=str(problem.source_path),
            fix="name a class that derives from torch.nn.Module",
        )
    return cls


def init_arguments(problem: Problem) -> tuple[list, dict]:
    """The constructor's positional and keyword arguments: from the configuration, or what the
    init factory returns (a list of positional arguments, or a dict of keyword arguments: config
    objects, which no TOML can write, come this way)."""
    if problem.init_capture is not None:
        return _captured_init(problem.init_capture)
    if problem.init_fn is None:
        return list(problem.init_args), dict(problem.init_kwargs)
    path = problem.init_path or problem.source_path
    fn = getattr(import_source(path, problem.search_paths), problem.init_fn)
    value = call_user(fn, path)
    if isinstance(value, dict) and all(isinstance(key, str) for key in value):
        return [], dict(value)
    if not isinstance(value, list | tuple):
        raise UserError(
            f"{problem.init_fn}() returned {type(value).__name__}, not a list or a dict",
            where=str(path),
            fix=f"return the constructor's arguments from {problem.init_fn}(): a list of "
            "positional ones (e.g. [GPTConfig(n_embd=768)]) or a dict of keyword ones",
        )
    return list(value), {}


def _captured_init(path: Path) -> tuple[list, dict]:
    """The constructor's arguments a capture saved. A pickle, written by the repository's code
    in the capture worker: loaded only here, in a worker that runs that code anyway."""
    try:
        args, kwargs = torch.load(path, weights_only=False)
    except Exception as err:
        raise UserError(
            f"loading the captured constructor arguments raised {type(err).__name__}: {err}",
            where=str(path),
            fix="make the classes of the constructor's arguments importable from the "
            "repository root, or configure init in [tool.kernelpilot]",
        ) from err
    return list(args), dict(kwargs)


def call_user(fn, path: Path):
    """Call one of the user's no-argument functions; what it raises is a UserError quoting it
    (running out of memory said as such: no argument would help there)."""
    try:
        return fn()
    except Exception as err:
        name = getattr(fn, "__name__", "the factory")
        if is_out_of_memory(err):
            raise UserError(
                f"{name}() {ran_out(err)}",
                where=str(path),
                fix=f"make {name}() return smaller inputs, or raise the limit",
            ) from err
        if isinstance(err, TypeError) and _called_wrong(err):
            fix = f"make {name}() run without arguments: kernelpilot calls it with none"
        else:
            fix = f"fix what {name}() raised, so that it runs on its own"
        raise UserError(
            f"{name}() raised {type(err).__name__}: {err}{raised_at(err)}",
            where=str(path),
            fix=fix,
        ) from err


def _called_wrong(err: TypeError) -> bool:
    """The TypeError is the call itself (missing or unexpected arguments), not one inside."""
    frames = traceback.extract_tb(err.__traceback__)
    return len(frames) == 1 and "argument" in str(err)


def raised_at(err: BaseException) -> str:
    """`` (at file.py:12: the line)``: where in the user's code ``err`` was raised (the last
    frame outside torch and kernelpilot); empty where no such frame is."""
    frames = [
        frame
        for frame in traceback.extract_tb(err.__traceback__)
        if not _ours_or_torch(frame.filename)
    ]
    if not frames:
        return ""
    frame = frames[-1]
    line = f": {frame.line.strip()[:120]}" if frame.line else ""
    return f" (at {Path(frame.filename).name}:{frame.lineno}{line})"


_HERE = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "agents", "bot")
_NOT_THEIRS = [Path(torch.__file__).resolve().parent, *(_HERE / name for name in PACKAGES)]


def _ours_or_torch(filename: str) -> bool:
    path = Path(filename)
    return any(path.is_relative_to(root) for root in _NOT_THEIRS)
