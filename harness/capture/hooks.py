"""The recording, inside the capture worker: each requested class's ``__init__`` and ``forward``
wrapped in place on the class object, so the repository's own imports of it are recorded.

Only instances of exactly that class count (a subclass is its own target). Per instance: the
constructor's arguments and where it was called, and its forward calls as specs (shapes, dtypes,
value ranges; plain values as they are), never the tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import sys
import traceback
import weakref
from collections.abc import Iterator
from pathlib import Path

import torch

from harness.capture.records import (
    GUESSED,
    MAX_CALLS,
    ArgSpec,
    CallSpec,
    CapturedTarget,
    TensorSpec,
)
from harness.problem.cases import PLAIN_INPUTS
from harness.problem.user_code import package_name

PLAIN = PLAIN_INPUTS  # what a factory may return beside tensors, a captured call alike


class Instance:
    def __init__(self, module: torch.nn.Module, args: tuple, kwargs: dict, built_at: str,
                 guessed: bool) -> None:  # fmt: skip
        self.args, self.kwargs, self.built_at, self.guessed = args, kwargs, built_at, guessed
        self.module = weakref.ref(module)  # to call it with guessed inputs, if nothing did
        self.inputs_guessed = False  # built by the repository, called by the guess
        self.calls: dict[str, CallSpec] = {}  # the calls that returned, by shape
        self.running: list[CallSpec] = []  # the calls not returned yet (the report may not wait)

    def seen_calls(self) -> dict[str, CallSpec]:
        """The calls that returned; where none has, those still running when asked."""
        return self.calls or {_shape_key(call): call for call in self.running}

    def by_guess(self) -> bool:
        return self.guessed or self.inputs_guessed

    def provenance(self) -> int:
        """0: built and called by the repository's code; 1: built by it, called by the guess;
        2: built by the guess."""
        return 2 if self.guessed else int(self.inputs_guessed)


class Recorder:
    """Every instance of the requested classes, and its calls."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.instances: dict[str, list[Instance]] = {}
        self.problems: dict[str, str] = {}
        self.classes: dict[str, type] = {}
        self.no_guess: dict[str, str] = {}  # why a class could not be guessed
        self.guessing = False  # instances built now are guesses (harness.capture.guess)
        self.quiet = False  # instances built now are not recorded (a guess's build on meta)

    def hook(self, path: str, class_name: str) -> None:
        key = f"{path}:{class_name}"
        self.instances[key] = []
        name, folder = package_name(self.root / path, {self.root})
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
        try:
            module = importlib.import_module(name)
        except Exception as err:  # the repository's own import: said per class
            self.problems[key] = f"importing {name} raised {type(err).__name__}: {err}"[:400]
            return
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, torch.nn.Module)):
            self.problems[key] = f"{name}.{class_name} is not an nn.Module class"
            return
        self.classes[key] = cls
        _wrap(cls, self.instances[key], self)

    def _where(self) -> str:
        """The line that called the constructor (skipping this file and the wrapper): the
        test, the script, or the module that builds it."""
        for frame in reversed(traceback.extract_stack()[:-2]):
            if frame.filename.startswith("<"):  # "<frozen runpy>", "<string>": no file
                continue
            path = Path(os.path.abspath(frame.filename))
            if path.is_relative_to(self.root) and "torch" not in path.parts:
                return f"{path.relative_to(self.root)}:{frame.lineno}"
        return ""

    @contextlib.contextmanager
    def unrecorded(self) -> Iterator[None]:
        self.quiet = True
        try:
            yield
        finally:
            self.quiet = False

    def targets(self, source: str, saved: Path) -> list[CapturedTarget]:
        found = []
        for number, (key, instances) in enumerate(self.instances.items()):
            path, _, class_name = key.partition(":")
            record = CapturedTarget(path=path, class_name=class_name, source=source)
            called = [one for one in instances if one.seen_calls()]
            if called:  # what the repository did wins: its calls, then its builds, then guesses
                first = min(one.provenance() for one in called)
                called = [one for one in called if one.provenance() == first]
            if key in self.problems:
                record.problem = self.problems[key]
            elif not called:
                ours = [one for one in instances if not one.guessed]
                built = "built but never called" if ours else "never built"
                said = [f"{built} while {source} ran"] if source else []
                if key in self.no_guess:
                    said.append(f"no guess: {self.no_guess[key]}")
                record.problem = "; ".join(said)[:1000]
            else:
                best = max(called, key=lambda one: max(c.size() for c in one.seen_calls().values()))
                record = _with_init(record, best, saved / f"init-{number}.pt")
                record.guessed = best.by_guess()
                if best.guessed:
                    record.source = GUESSED
                calls = sorted(best.seen_calls().values(), key=lambda call: -call.size())
                record.calls = calls[:MAX_CALLS]
                record.built_at = best.built_at
            found.append(record)
        return found


def _wrap(cls: type[torch.nn.Module], instances: list[Instance], recorder: Recorder) -> None:
    init, forward = cls.__init__, cls.forward  # type: ignore[misc]
    seen: dict[int, Instance] = {}

    @functools.wraps(init)
    def recorded_init(self, *args, **kwargs):
        if type(self) is cls and not recorder.quiet:
            one = Instance(self, args, kwargs, recorder._where(), recorder.guessing)
            seen[id(self)] = one
            instances.append(one)
        init(self, *args, **kwargs)

    @functools.wraps(forward)
    def recorded_forward(self, *args, **kwargs):
        one = seen.get(id(self)) if type(self) is cls else None
        call = _call_spec(args, kwargs) if one is not None else None  # before it runs: in place
        if one is None or call is None:
            return forward(self, *args, **kwargs)
        one.running.append(call)
        try:
            out = forward(self, *args, **kwargs)
        finally:
            one.running.remove(call)
        one.calls.setdefault(_shape_key(call), call)  # a call that raised is no call to optimize
        return out

    cls.__init__ = recorded_init  # type: ignore[method-assign]
    cls.forward = recorded_forward  # type: ignore[method-assign]


def _call_spec(args: tuple, kwargs: dict) -> CallSpec | None:
    """The call's spec; None where an argument is neither a tensor nor a plain value."""
    try:
        return CallSpec(
            args=[_arg_spec(value) for value in args],
            keywords={name: _arg_spec(value) for name, value in kwargs.items()},
        )
    except (TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return None


def _arg_spec(value) -> ArgSpec:
    if isinstance(value, torch.Tensor):
        with torch.no_grad():
            data = value.detach()
            numbers = data.double().flatten()
            numbers = numbers[torch.isfinite(numbers)]  # NaN and Inf are no range to draw from
            if not numbers.numel():
                numbers = torch.zeros(1, dtype=torch.float64)
            return ArgSpec(
                tensor=TensorSpec(
                    shape=list(data.shape),
                    dtype=str(data.dtype).removeprefix("torch."),
                    low=float(numbers.min()),
                    high=float(numbers.max()),
                    mean=float(numbers.mean()),
                    std=float(numbers.std()) if numbers.numel() > 1 else 0.0,
                )
            )
    if isinstance(value, PLAIN):
        return ArgSpec(value=value)  # a ValidationError (nan, a long string): not recorded
    raise TypeError(type(value).__name__)


def _shape_key(call: CallSpec) -> str:
    return repr([arg.tensor.shape if arg.tensor else arg.value for arg in call.args]) + repr(
        {name: arg.tensor.shape if arg.tensor else arg.value for name, arg in call.keywords.items()}
    )


def _with_init(record: CapturedTarget, one: Instance, file: Path) -> CapturedTarget:
    """The constructor's arguments: as plain values where they all are, else saved to ``file``
    for the workers (config objects), with their source where it can be written out."""
    values = [*one.args, *one.kwargs.values()]
    if all(isinstance(value, PLAIN) for value in values):
        record.init_args, record.init_kwargs = list(one.args), dict(one.kwargs)
        return record
    try:
        torch.save((one.args, one.kwargs), file)
    except Exception as err:  # an argument pickle cannot take (a lambda, an open file)
        record.problem = f"its constructor's arguments cannot be saved: {type(err).__name__}: {err}"
        return record
    record.init_file = file.name
    written = init_source(one.args, one.kwargs)
    if written is not None:
        record.init_imports, record.init_expression = written
    return record


def init_source(args: tuple, kwargs: dict) -> tuple[list[str], str] | None:
    """The constructor's arguments as a factory's return expression and its imports (``[Config(
    dim=8)]`` or ``{"config": Config(dim=8)}``), where every value is plain or a dataclass of
    plain values and they are not both positional and keyword; None otherwise."""
    imports: set[str] = set()

    def source(value) -> str | None:
        if isinstance(value, PLAIN):
            return repr(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value)
            fields = []
            for field in dataclasses.fields(value):
                if field.init:
                    text = source(getattr(value, field.name))
                    if text is None:
                        return None
                    fields.append(f"{field.name}={text}")
            imports.add(f"from {cls.__module__} import {cls.__qualname__}")
            return f"{cls.__qualname__}({', '.join(fields)})"
        return None

    if args and kwargs:
        return None
    parts = [source(value) for value in args]
    named = [(name, source(value)) for name, value in kwargs.items()]
    if any(text is None for text in parts) or any(text is None for _, text in named):
        return None
    if named:
        expression = "{" + ", ".join(f"{name!r}: {text}" for name, text in named) + "}"
    else:
        expression = "[" + ", ".join(str(text) for text in parts) + "]"
    return sorted(imports), expression
