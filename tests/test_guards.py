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
