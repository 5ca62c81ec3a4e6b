"""The extra cases every candidate is checked on: shapes drawn from the run's seeds, a wide
range of values, other memory layouts."""

from __future__ import annotations

import torch

from harness.problem.variants import copy_with_layout, resized_inputs, strided_inputs
from harness.workers import guards


def _inputs() -> list:
    return [torch.randn(64, 32), torch.randn(32), 0.5]


def test_batch_variant_is_a_smaller_batch_drawn_from_the_seed():
    sizes = {resized_inputs(_inputs(), 1, seed)[0].shape[0] for seed in range(30)}
    assert len(sizes) > 3, "a fixed size could be special-cased by a kernel"
    assert all(16 <= size < 64 for size in sizes)


def test_batch_variant_never_shares_the_original_sizes_multiples():
    """A fallback keyed on the batch being a multiple of 64 (the benchmark's 256) took the
    kernel path on a drawn batch of 192 in CI, and the cheat passed: odd sizes only."""
    for old in (2, 3, 8, 64, 256, 1000):
        inputs = [torch.randn(old, 4)]
        for seed in range(200):
            new = resized_inputs(inputs, 1, seed)[0].shape[0]
            assert (old - new) % 2 == 1 and max(1, old // 4) <= new < old, (old, new)


def test_last_dim_variant_adds_an_odd_amount_to_every_matching_tensor():
    for seed in range(30):
        x, bias, scale = resized_inputs(_inputs(), 2, seed)
        grown = x.shape[-1] - 32
        assert grown % 2 == 1 and 1 <= grown <= 15
        assert bias.shape == (x.shape[-1],) and scale == 0.5
    assert len({resized_inputs(_inputs(), 2, seed)[0].shape[-1] for seed in range(30)}) > 3


def test_the_same_seed_gives_the_same_shapes_and_values():
    """Every worker draws a case again from its seed, and the digest of its draw must match
    the reference worker's."""
    for variant in (1, 2):
        for size in (40, 300, 5000):  # runs of 1, 4 and 78 elements (tails included)
            inputs = [torch.randn(size, 7, generator=torch.Generator().manual_seed(size))]
            first, second = resized_inputs(inputs, variant, 7), resized_inputs(inputs, variant, 7)
            assert torch.equal(first[0], second[0]), (variant, size)


def test_an_input_with_an_empty_dimension_gets_an_empty_variant():
    (x,) = resized_inputs([torch.randn(4, 0)], 1, 3)
    assert x.shape[1] == 0 and x.shape[0] < 4
    # An empty batch has no values to draw a batch of 2 from: no such case, not garbage.
    assert resized_inputs([torch.randn(0, 5)], 1, 3) is None


def test_values_come_from_the_original_inputs():
    inputs = _inputs()
    x = resized_inputs(inputs, 1, 3)[0]
    assert set(x.flatten().tolist()) <= set(inputs[0].flatten().tolist())


class _Exp(torch.nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x, offset=0):
        return torch.exp(x * self.factor) + offset


def test_wide_range_case_scales_float_inputs():
    from harness.problem.variants import scaled_inputs, wide_scale

    inputs = [torch.randn(8, 4), 3]
    scaled = scaled_inputs(inputs, seed=5)
    assert 4.0 <= wide_scale(5) <= 16.0 and scaled[1] == 3
    assert torch.equal(scaled[0], inputs[0] * wide_scale(5))


OVERFLOWS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.exp(x * 10.0)


def get_inputs():
    return [torch.randn(16, 8)]


def get_init_inputs():
    return []
"""


def test_no_wide_range_case_where_the_reference_overflows(tmp_path):
    from harness.config import EvalConfig
    from harness.problem.load import problem_from_target
    from harness.sandbox.jobs import CaseSpec, WorkerJob
    from harness.workers.reference import ReferenceRun

    (tmp_path / "overflows.py").write_text(OVERFLOWS)
    problem = problem_from_target(str(tmp_path / "overflows.py"), "cpu", "float32")
    job = WorkerJob(
        mode="reference", problem=problem, config=EvalConfig(), cache_dir=tmp_path, seeds=[5]
    )
    run = ReferenceRun(job, tmp_path)
    wide = CaseSpec(name="wide", kind="wide", seed=5, reference_case=1)
    assert not run.run_extra(wide, strengthened=False)  # exp(10 * 16 * x) is not finite
    assert not (tmp_path / "reference-1.pt").exists()
    same = CaseSpec(name="seed", kind="seed", seed=5, reference_case=0)
    assert run.run_extra(same, strengthened=False) and (tmp_path / "reference-0.pt").exists()


def test_strided_inputs_keep_values_and_change_the_layout():
    x, bias, scale = strided_inputs(_inputs())
    assert x.stride() == (1, 64)  # column-major
    assert bias.stride() == (2,) and scale == 0.5  # every other element
    original = _inputs()
    laid_out = strided_inputs(original)
    assert all(torch.equal(a, b) for a, b in zip(laid_out[:2], original[:2], strict=True))
    assert strided_inputs([torch.randn(1), 3]) is None  # nothing to lay out differently


def test_guarded_inputs_keep_their_layout_with_poison_in_the_gaps():
    bias = strided_inputs([torch.randn(32)])[0]
    guarded = guards.guarded(bias)
    assert guarded.stride() == (2,) and torch.equal(guarded, bias)
    # what a kernel reading data_ptr() as contiguous sees: every other value is the poison
    read_as_contiguous = torch.as_strided(guarded, (32,), (1,), guarded.storage_offset())
    assert read_as_contiguous[1::2].isnan().all()
    expanded = torch.randn(1, 8).expand(4, 8)  # shared elements: a contiguous copy
    assert guards.guarded(expanded).is_contiguous()
    assert torch.equal(guards.guarded(expanded), expanded)


def test_layout_copies_keep_a_gapped_layout():
    """``.to(device)`` would make a gapped tensor contiguous; the cases' copies must not."""
    bias = strided_inputs([torch.randn(32)])[0]
    assert bias.to(torch.float64).is_contiguous()  # what a plain copy does
    copy = copy_with_layout(bias, "cpu")
    assert copy.stride() == (2,) and torch.equal(copy, bias)
