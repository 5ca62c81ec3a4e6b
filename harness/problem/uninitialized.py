"""Modules whose constructor leaves weights uninitialized, built the same in every process.

A model meant to load a checkpoint may make a weight with ``torch.empty`` and never fill it
(whisper's positional embeddings): its values are whatever the memory held, different in each
worker (so a reference and a candidate built apart disagree), and often huge or NaN (so every
output is). Built here, PyTorch fills uninitialized memory with NaN
(``torch.utils.deterministic.fill_uninitialized_memory``), and a floating weight that is NaN
throughout is then drawn as a trained one might be, normal with a spread of 0.02, from the
build's seed: the same in every process, and ordinary values.

    module = built(lambda: cls(*args, **kwargs), seed)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

SPREAD = 0.02  # a trained transformer's weights' typical spread


def built(make: Callable[[], nn.Module], seed: int) -> nn.Module:
    """``make()``, with the weights it left uninitialized drawn from ``seed``."""
    with _uninitialized_as_nan():
        module = make()
    fill_uninitialized(module, seed)
    return module


def fill_uninitialized(module: nn.Module, seed: int) -> None:
    """Each floating parameter or buffer that is NaN throughout, drawn from ``seed``."""
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            if not tensor.is_floating_point() or not tensor.numel() or tensor.is_meta:
                continue
            flat = tensor.detach().reshape(-1)
            if not bool(flat[0].isnan()) or not bool(flat.isnan().all()):  # the first: cheap
                continue
            if tensor.device not in generators:
                generators[tensor.device] = torch.Generator(tensor.device).manual_seed(seed)
            drawn = torch.randn(
                tensor.shape, generator=generators[tensor.device], device=tensor.device
            )
            tensor.copy_(drawn * SPREAD)


@contextmanager
def _uninitialized_as_nan() -> Iterator[None]:
    """Deterministic mode, warnings only (a constructor's nondeterministic op still runs), with
    uninitialized memory filled; the settings as they were afterwards."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]
