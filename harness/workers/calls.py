"""How every worker calls a module and reads what it returns, whatever shape real code gives both.

A forward's inputs travel as one flat list, so that every check on inputs (digests, guard
regions, aliasing, "unchanged", the shape and layout variants) sees each tensor: the positional
arguments first, then the keyword arguments the problem names (``Problem.input_keywords``, the
last ones of the list). ``bound`` turns a module into the callable the workers time and check,
taking that list positionally.

A forward may return any nest of tuples, lists, dicts, named tuples and dataclasses holding
tensors, ``None`` and plain values (``(logits, None)``, ``{"hidden": h, "aux": a}``, a
``ModelOutput``). ``leaves`` takes it apart into its tensors, which are checked and compared as
ever, and its *form*: the nest written out with every tensor as ``T``, every other value as its
``repr``. A candidate's form must equal the reference's: the tensors are compared by tolerance,
the rest must be the same.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

# Values that may sit beside tensors in an output, compared for equality through their repr.
PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device)
FORM_CHARS = 2000  # a form is recorded and shown up to this long (a deep ModelOutput is long)
MAX_DEPTH = 32


class NotAnOutput(ValueError):
    """A forward's result holds something that is neither a tensor nor a plain value."""


def bound(fn: Callable, keywords: Sequence[str]) -> Callable:
    """``fn`` taking the flat input list positionally: its last ``len(keywords)`` values go to
    it by those names. With no keywords, ``fn`` itself (nothing added to a timed call)."""
    if not keywords:
        return fn
    names = tuple(keywords)
    count = len(names)

    def call(*flat):
        return fn(*flat[:-count], **dict(zip(names, flat[-count:], strict=True)))

    return call


def leaves(value: Any) -> tuple[list[torch.Tensor], str]:
    """The tensors of an output, in a fixed order, and its form; ``NotAnOutput`` when it holds
    anything else than tensors, plain values and the containers above."""
    tensors: list[torch.Tensor] = []
    form = _walk(value, tensors, 0)
    return tensors, form[:FORM_CHARS]


def _walk(value: Any, tensors: list[torch.Tensor], depth: int) -> str:
    if depth > MAX_DEPTH:
        raise NotAnOutput(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return "T"
    if isinstance(value, PLAIN):
        return repr(value)
    inner = depth + 1
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
        items = ", ".join(
            f"{name}={_walk(getattr(value, name), tensors, inner)}" for name in value._fields
        )
        return f"{type(value).__qualname__}({items})"
    if isinstance(value, tuple | list):
        items = ", ".join(_walk(item, tensors, inner) for item in value)
        return f"({items})" if isinstance(value, tuple) else f"[{items}]"
    if isinstance(value, dict):  # a ModelOutput is an OrderedDict: its set fields, in order
        for key in value:
            if not isinstance(key, str | int):
                raise NotAnOutput(f"a dict with a {type(key).__name__} key")
        items = ", ".join(f"{key!r}: {_walk(item, tensors, inner)}" for key, item in value.items())
        return f"{type(value).__qualname__}{{{items}}}"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ", ".join(
            f"{field.name}={_walk(getattr(value, field.name), tensors, inner)}"
            for field in dataclasses.fields(value)
        )
        return f"{type(value).__qualname__}({items})"
    raise NotAnOutput(f"a {type(value).__qualname__}")


def describe_form(form: str) -> str:
    """A form as a report line shows it: ``T`` spelled out."""
    return form if len(form) <= 160 else form[:157] + "..."
