"""What a trace takes as fixed: the plain values forward read, and the sequences it unpacked.

torch.fx's symbolic tracing runs ``forward`` with proxies for the tensors, but every other value
forward reads is a real Python value, and the graph keeps it as a constant: ``self.n_embd`` in a
``split``, ``self.n_head`` in a ``view``, ``self.training`` in a branch or as dropout's flag.
Unpacking a proxy (``q, k, v = x.split(...)``) fixes the count. ``AttributeWatch`` records the
first kind while tracing, ``UnpackWatch`` the second; the candidate guards both
(``agents.offline.guards``) and runs the original forward where they no longer hold.

Reads are seen by giving each watched object, for the trace only, a subclass of its own class
that records attribute reads; objects whose class cannot be swapped (``SimpleNamespace``) have
all their fields recorded instead, as if read.
"""

from __future__ import annotations

import dis
import enum
import inspect
import sys
import types
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.fx import Node, Proxy

# nn.Module's own bookkeeping (hooks, parameter dicts, a compiled call): read by every call,
# never forward's data.
_MODULE_INTERNALS = frozenset({*vars(nn.Module()), *dir(nn.Module)}) - {"training"}
# Values that are code or graph values, not data the graph could have baked in.
_NOT_DATA = (nn.Module, torch.Tensor, Proxy, type, types.ModuleType, types.MethodType)


@dataclass(frozen=True)
class Read:
    """``target`` (a dotted path from the root module: ``attn.n_head``, ``config.n_embd``,
    ``training``) held ``value`` when the trace read it."""

    target: str
    value: object


class AttributeWatch:
    """Records the plain values read from ``modules`` (and from the objects reached through
    their attributes, a config say) while active; ``reads()`` lists them once, first value."""

    def __init__(self, root: nn.Module, modules: list[nn.Module]) -> None:
        self._paths: dict[int, list[str]] = {}
        for path, module in root.named_modules(remove_duplicate=False):
            self._paths.setdefault(id(module), []).append(path)
        self._modules = modules
        self._values: dict[int, dict[str, object]] = {}
        self._swapped: list[tuple[object, type]] = []
        self._kept: list[object] = []  # watched objects stay alive, so their ids stay theirs
        self._classes: dict[type, type] = {}
        self._paused = False

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Reads made meanwhile are not recorded: a layer's own forward, run by a trace at fixed
        shapes for its output's shape, reads its settings, which its call reads again live."""
        self._paused, before = True, self._paused
        try:
            yield
        finally:
            self._paused = before

    def __enter__(self) -> AttributeWatch:
        for module in self._modules:
            if not self._swap(module):
                self.__exit__()
                raise TypeError(f"cannot watch the attribute reads of {type(module).__name__}")
        return self

    def __exit__(self, *exc: object) -> None:
        for obj, original in reversed(self._swapped):
            object.__setattr__(obj, "__class__", original)
        self._swapped.clear()

    def reads(self) -> list[Read]:
        found: dict[str, Read] = {}
        for key, values in self._values.items():
            for path in self._paths.get(key, []):
                for name, value in values.items():
                    target = f"{path}.{name}" if path else name
                    found.setdefault(target, Read(target, value))
        return sorted(found.values(), key=lambda read: read.target)

    def _swap(self, obj: object) -> bool:
        original = type(obj)
        try:
            watching = self._classes.get(original) or self._watching_class(original)
            object.__setattr__(obj, "__class__", watching)
        except TypeError:  # a built-in or immutable type (SimpleNamespace), a final class
            return False
        self._classes[original] = watching
        self._swapped.append((obj, original))
        self._kept.append(obj)
        return True

    def _watching_class(self, original: type) -> type:
        watch = self

        def __getattribute__(obj, name):  # noqa: N807
            value = original.__getattribute__(obj, name)
            watch._saw(obj, name, value)
            return value

        namespace: dict[str, object] = {
            "__getattribute__": __getattribute__,
            "__module__": original.__module__,
            "__qualname__": original.__qualname__,
            "__slots__": (),
        }
        if hasattr(original, "__getattr__"):  # nn.Module's: parameters, buffers, submodules

            def __getattr__(obj, name):  # noqa: N807
                value = original.__getattr__(obj, name)  # type: ignore[attr-defined]
                watch._saw(obj, name, value)
                return value

            namespace["__getattr__"] = __getattr__
        return type(original.__name__, (original,), namespace)

    def _saw(self, obj: object, name: str, value: object) -> None:
        if (
            self._paused
            or name.startswith("__")
            or (isinstance(obj, nn.Module) and name in _MODULE_INTERNALS)
        ):
            return
        if isinstance(value, _NOT_DATA) or (callable(value) and name not in _own_fields(obj)):
            return  # methods, submodules, parameters (proxies while tracing): read live
        if _is_object(value):  # its fields are the data: watched from here on
            self._reach(value, [f"{path}.{name}" if path else name for path in self._path(obj)])
            return
        self._values.setdefault(id(obj), {}).setdefault(name, value)

    def _path(self, obj: object) -> list[str]:
        return self._paths.get(id(obj), [])

    def _reach(self, obj: object, paths: list[str]) -> None:
        """An object reached through an attribute: its own reads are watched from here on."""
        known = id(obj) in self._paths
        self._paths.setdefault(id(obj), [])
        self._paths[id(obj)] += [path for path in paths if path not in self._paths[id(obj)]]
        if known:
            return
        if not self._swap(obj):
            self._kept.append(obj)
            for field, value in vars(obj).items():
                self._saw(obj, field, value)


def _own_fields(obj: object) -> dict[str, object]:
    try:
        return vars(obj)
    except TypeError:
        return {}


def _is_object(value: object) -> bool:
    """An instance of a plain class (a config, a namespace): its fields are what forward reads."""
    return (
        hasattr(value, "__dict__")
        and not callable(value)
        and not isinstance(value, (*_NOT_DATA, enum.Enum))
        and type(value).__module__ != "builtins"
    )


class UnpackWatch:
    """Records, while active, the proxies the traced code unpacked and into how many values:
    ``a, b = x.chunk(2)`` is traced as ``x.chunk(2)[0]`` and ``[1]``, and the count is fixed."""

    def __init__(self) -> None:
        self.counts: dict[Node, set[int]] = {}
        self._original = Proxy.__iter__

    def __enter__(self) -> UnpackWatch:
        watch = self

        def __iter__(proxy):  # noqa: N807
            frame = inspect.currentframe()
            caller = frame.f_back if frame is not None else None
            count = _unpack_count(caller) if caller is not None else None
            if count is None:  # not an unpacking: torch.fx decides (it refuses, by default)
                return proxy.tracer.iter(proxy)
            watch.counts.setdefault(proxy.node, set()).add(count)
            return (proxy[index] for index in range(count))

        Proxy.__iter__ = __iter__  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        Proxy.__iter__ = self._original  # type: ignore[method-assign]


def _unpack_count(frame: types.FrameType) -> int | None:
    """The count of the UNPACK_SEQUENCE the frame is executing, as torch.fx reads it."""
    instructions = list(dis.get_instructions(frame.f_code))
    if sys.version_info >= (3, 11):
        index = bisect_left(instructions, frame.f_lasti, key=lambda item: item.offset)
    else:
        index = frame.f_lasti // 2
    if index < len(instructions) and instructions[index].opname == "UNPACK_SEQUENCE":
        return int(instructions[index].argval)
    return None
