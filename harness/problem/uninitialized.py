"""Modules whose constructor leaves weights uninitialized, built the same in every process.

A model meant to load a checkpoint may make a weight with ``torch.empty`` and never fill it
(whisper's positional embeddings): its values are whatever the memory held, different in each
worker (so a reference and a candidate built apart disagree), and often huge or NaN (so every
output is). Built here, PyTorch fills uninitialized memory with NaN
(``torch.utils.deterministic.fill_uninitialized_memory``), and a floating weight that is NaN
throughout is then drawn as a trained one might be, normal with a spread of 0.02, from the
build's seed: the same in every process, and ordinary values. A weight the constructor set to
NaN throughout on purpose (a "not yet seen" marker) is drawn too: it cannot be told apart.

    module = built(lambda: cls(*args, **kwargs), seed)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

SPREAD = 0.02  # a trained transformer's weights' typical spread
SEED_SALT = 0x5EED  # drawn apart from the constructor's own stream, which starts at the seed
CHUNK = 1 << 24  # elements scanned for NaN at a time: no copy the size of a large weight
DRAWN = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def built(make: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``make()``, with the weights it left uninitialized drawn from ``seed``."""
    with _uninitialized_as_nan():
        module = make()
    fill_uninitialized(module, seed)
    return module


def fill_uninitialized(module: nn.Module, seed: int) -> None:
    """Each floating parameter or buffer that is NaN throughout, drawn from ``seed`` in place."""
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if not _all_nan(tensor):
                continue
            if tensor.device not in generators:
                generator = torch.Generator(tensor.device)
                generators[tensor.device] = generator.manual_seed(seed ^ SEED_SALT)
            tensor.normal_(0.0, SPREAD, generator=generators[tensor.device])


def _all_nan(tensor: torch.Tensor) -> bool:
    """A plain floating tensor holding NaN throughout (lazy, sparse and meta ones are not)."""
    if (
        nn.parameter.is_lazy(tensor)
        or tensor.dtype not in DRAWN
        or tensor.layout != torch.strided
        or tensor.is_meta
        or not tensor.numel()
        or not bool(tensor[(0,) * tensor.dim()].isnan())  # the first value: cheap
    ):
        return False
    values = tensor.detach()
    if not values.is_contiguous():  # a strided view: scanned whole (a bool copy of its size)
        return bool(values.isnan().all())
    flat = values.view(-1)
    return all(
        bool(flat[start : start + CHUNK].isnan().all()) for start in range(0, flat.numel(), CHUNK)
    )


@contextmanager
def _uninitialized_as_nan() -> Iterator[None]:
    """Deterministic mode, warnings only (a constructor's nondeterministic op still runs, and
    its alert is not shown), with uninitialized memory filled; the settings as they were
    afterwards."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"(?i).*determinis", UserWarning)
            yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
