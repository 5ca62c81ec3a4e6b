"""Weights a constructor leaves uninitialized (``torch.empty``, for a checkpoint to fill) are
the same in every build from one seed, and ordinary numbers: a reference and a candidate built
in two workers agree, and no output is NaN for garbage in the memory."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from harness.problem.cases import build_reference
from harness.problem.load import problem_from_target
from harness.problem.uninitialized import SPREAD, built
from tests.conftest import write_module


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


def test_a_weight_only_partly_nan_is_the_constructors():
    """NaN throughout is what PyTorch's fill leaves; a value the constructor wrote is kept."""

    class Partly(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.table = nn.Parameter(torch.empty(4, 4))
            with torch.no_grad():
                self.table[1:] = 1.0  # its first row left as torch.empty made it

    table = built(Partly, seed=0).table
    assert torch.isnan(table[0]).all() and (table[1:] == 1.0).all()


def _settings() -> tuple:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )


@pytest.mark.parametrize("fails", [False, True])
def test_the_deterministic_settings_are_restored(fails: bool):
    class Raises(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            raise ValueError("a constructor that fails")

    before = _settings()
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        if fails:
            with pytest.raises(ValueError):
                built(Raises, seed=0)
        else:
            built(Checkpointed, seed=0)
        assert _settings() == (before[0], before[1], False)
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = before[2]


def test_every_reference_build_draws_them_alike(tmp_path):
    """The harness's reference (``build_reference``), built twice as two workers build it."""
    path = write_module(
        tmp_path,
        "checkpointed",
        """
        import torch
        import torch.nn as nn

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.positions = nn.Parameter(torch.empty(64, 32))

            def forward(self, x):
                return x + self.positions

        def get_inputs():
            return [torch.randn(2, 64, 32)]

        def get_init_inputs():
            return []
        """,
    )
    problem = problem_from_target(str(path), "cpu", None)
    first, second = (build_reference(problem, seed=7).positions for _ in range(2))
    assert torch.isfinite(first).all() and torch.equal(first, second)
