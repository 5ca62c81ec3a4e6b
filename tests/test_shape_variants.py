"""The extra shapes every candidate is checked on are drawn from the run's seeds."""

from __future__ import annotations

import torch

from harness.problem import resized_inputs


def _inputs() -> list:
    return [torch.randn(64, 32), torch.randn(32), 0.5]


def test_batch_variant_is_a_smaller_batch_drawn_from_the_seed():
    sizes = {resized_inputs(_inputs(), 1, seed)[0].shape[0] for seed in range(30)}
    assert len(sizes) > 3, "a fixed size could be special-cased by a kernel"
    assert all(16 <= size < 64 for size in sizes)


def test_last_dim_variant_adds_an_odd_amount_to_every_matching_tensor():
    for seed in range(30):
        x, bias, scale = resized_inputs(_inputs(), 2, seed)
        grown = x.shape[-1] - 32
        assert grown % 2 == 1 and 1 <= grown <= 15
        assert bias.shape == (x.shape[-1],) and scale == 0.5
    assert len({resized_inputs(_inputs(), 2, seed)[0].shape[-1] for seed in range(30)}) > 3


def test_the_same_seed_gives_the_same_shapes_and_values():
    first, second = resized_inputs(_inputs(), 1, 7), resized_inputs(_inputs(), 1, 7)
    assert first[0].shape == second[0].shape


def test_values_come_from_the_original_inputs():
    inputs = _inputs()
    x = resized_inputs(inputs, 1, 3)[0]
    assert set(x.flatten().tolist()) <= set(inputs[0].flatten().tolist())
