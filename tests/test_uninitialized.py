"""Weights a constructor leaves uninitialized (``torch.empty``, for a checkpoint to fill) are
the same in every build from one seed, and ordinary numbers: a reference and a candidate built
in two workers agree, and no output is NaN for garbage in the memory."""

from __future__ import annotations

import torch
from torch import nn

from harness.problem.uninitialized import SPREAD, built


class Checkpointed(nn.Module):
    """As whisper's decoder: a positional embedding made with torch.empty and never filled."""

    def __init__(self) -> None:
        super().__init__()
        self.positions = nn.Parameter(torch.empty(64, 32))
        self.proj = nn.Linear(32, 32)
        self.register_buffer("mask", torch.empty(8, 8).fill_(-torch.inf).triu_(1))


def test_an_unfilled_weight_is_drawn_from_the_seed_and_the_rest_is_the_constructors():
    first, second = (built(Checkpointed, seed=3) for _ in range(2))
    assert torch.equal(first.positions, second.positions)
    assert torch.isfinite(first.positions).all()
    assert 0.5 * SPREAD < float(first.positions.detach().std()) < 2 * SPREAD
    torch.manual_seed(5)
    plain = Checkpointed()
    torch.manual_seed(5)
    ours = built(Checkpointed, seed=5)
    assert torch.equal(ours.proj.weight, plain.proj.weight)  # initialized: as it was made
    assert torch.equal(ours.mask, plain.mask)  # filled after torch.empty: as it was made
    assert not torch.equal(built(Checkpointed, seed=4).positions, first.positions)


def test_the_deterministic_settings_are_restored():
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    built(Checkpointed, seed=0)
    after = (
        torch.are_deterministic_algorithms_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    assert after == before
