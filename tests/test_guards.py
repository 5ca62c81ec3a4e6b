"""The worker's dynamic defences on their own, without a candidate (no build, in process).

The corpus shows them catching real cheats; where the static gate now catches a cheat first,
these tests keep the layer behind it honest.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from harness import guards, profiling
from harness.jobs import CheckFailed
from harness.worker_timing import check_fresh


def test_snapshot_is_stable_when_nothing_changes():
    assert guards.changed(guards.snapshot(), guards.snapshot()) == []


@pytest.mark.parametrize(
    ("owner", "name", "label"),
    [
        (time, "perf_counter", "time.perf_counter"),
        (F, "gelu", "torch.nn.functional.gelu"),
        (torch, "allclose", "torch.allclose"),
        (torch.Tensor, "__eq__", "torch.Tensor.__eq__"),
    ],
)
def test_snapshot_sees_a_swapped_function(monkeypatch, owner, name, label):
    before = guards.snapshot()
    monkeypatch.setattr(owner, name, lambda *args, **kwargs: None)
    assert label in guards.changed(before, guards.snapshot())


def test_snapshot_sees_a_harness_function_swapped(monkeypatch):
    import harness.tolerance

    before = guards.snapshot()
    monkeypatch.setattr(harness.tolerance, "compare", lambda *args: None)
    assert "harness.tolerance.compare" in guards.changed(before, guards.snapshot())


def test_snapshot_sees_the_thread_count_change():
    threads = torch.get_num_threads()
    before = guards.snapshot()
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        assert "torch.get_num_threads()" in guards.changed(before, guards.snapshot())
    finally:
        torch.set_num_threads(threads)


def test_guard_regions_poison_reads_past_either_end():
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    g = guards.guarded(x)
    assert torch.equal(g, x) and g.is_contiguous()
    raw = torch.tensor([], dtype=g.dtype).set_(g.untyped_storage())
    assert raw[guards.GUARD_ELEMENTS - 1].isnan() and raw[guards.GUARD_ELEMENTS + 6].isnan()


def test_overlaps_means_shared_storage():
    base = torch.zeros(10)
    assert guards.overlaps(base[:5], base[5:])  # same storage: a kernel can reach both
    assert not guards.overlaps(base, torch.zeros(10))


def test_fingerprint_changes_when_an_output_is_written_later():
    out = torch.randn(4, 4)
    before = guards.fingerprint([out])
    out[2, 2] += 1.0
    assert guards.fingerprint([out]) != before


def test_a_sample_sees_a_late_write_anywhere_in_a_large_output():
    out = torch.full((3000, 50), float("nan"))  # 150000 elements: a sample of every third
    taken = guards.sample([out])
    assert taken[0].numel() <= guards.SAMPLE_ELEMENTS
    assert guards.samples_unchanged(taken, [out])  # NaN matches NaN
    out[-1, -1] = 1.0  # the last element is always in the sample
    assert not guards.samples_unchanged(taken, [out])
    out = torch.full((3000, 50), float("nan"))
    out[: out.shape[0] // 2] = 0.0  # a writer half way through
    assert not guards.samples_unchanged(taken, [out])


def test_a_sample_reads_strided_and_scalar_outputs_in_place():
    wide = torch.arange(40.0).reshape(4, 10)
    out = wide.t()[:, ::2]  # non-contiguous: gathered through its strides, not copied
    scalar = torch.tensor(3.0)
    taken = guards.sample([out, scalar])
    assert torch.equal(taken[0][0], out[-1, -1]) and taken[1].item() == 3.0
    wide[0, 0] = -1.0  # out[0, 0]
    assert not guards.samples_unchanged(taken, [out, scalar])


def test_an_output_reusing_the_previous_calls_memory_fails():
    buffer = torch.empty(16)
    first, second = buffer[:8], buffer[:8]
    with pytest.raises(CheckFailed) as failed:
        check_fresh([second], [first], "case 2")
    assert failed.value.check == "fresh_outputs"
    check_fresh([torch.empty(8)], [first], "case 2")  # a new allocation is fine


@pytest.mark.parametrize(
    ("candidate_ops", "reference_ops", "problem"),
    [
        (["empty_like"], ["add", "gelu"], ""),  # all work in its own kernel
        (["gelu"], ["add", "gelu"], "aten::gelu"),  # PyTorch does the pointwise work
        (["addmm"], ["linear", "relu"], ""),  # keeps the matmul, fuses the rest
        (
            ["addmm", "mm"],
            ["linear", "relu"],
            "2 PyTorch matmul",
        ),  # more matmuls than the reference
        (["linear", "relu"], ["linear", "relu"], "aten::relu"),
        (["softmax"], ["softmax"], "no work moved"),  # the library op only: nothing of its own
    ],
)
def test_pytorch_compute_table(candidate_ops, reference_ops, problem):
    found = profiling.pytorch_compute_problems(candidate_ops, reference_ops)
    assert (problem in found) if problem else found == ""
