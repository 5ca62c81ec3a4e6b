"""The worker's dynamic defences on their own, without a candidate (no build, in process).

The corpus shows them catching real cheats; where the static gate now catches a cheat first,
these tests keep the layer behind it honest.
"""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn.functional as F

from harness.config import EvalConfig
from harness.problem.load import problem_from_target
from harness.sandbox.jobs import CheckFailed, WorkerJob
from harness.workers import guards, profiling
from harness.workers.timed_checks import check_fresh, check_unpatched
from tests.conftest import FIXTURES


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
    import harness.judge.tolerance

    before = guards.snapshot()
    monkeypatch.setattr(harness.judge.tolerance, "compare", lambda *args: None)
    assert "harness.judge.tolerance.compare" in guards.changed(before, guards.snapshot())


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


def _storage_of(tensor: torch.Tensor) -> torch.Tensor:
    """The whole storage of a guarded tensor as one flat tensor: guard, values, guard."""
    return torch.tensor([], dtype=tensor.dtype).set_(tensor.untyped_storage())


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
@pytest.mark.parametrize("where", ["before", "after"])
def test_same_values_sees_a_write_past_either_end(dtype, where):
    """An input's values unchanged but its guard region written: an out-of-bounds write."""
    x = guards.guarded(torch.arange(6).reshape(2, 3).to(dtype))
    original = x.clone()
    assert guards.same_values(x, original)
    edge = guards.GUARD_ELEMENTS - 1 if where == "before" else guards.GUARD_ELEMENTS + x.numel()
    _storage_of(x)[edge] = 0
    assert torch.equal(x, original)  # the values themselves are as they were
    assert not guards.same_values(x, original)


def test_same_values_sees_a_changed_input_and_matches_nan():
    x = guards.guarded(torch.tensor([1.0, float("nan"), 3.0]))
    original = x.clone()
    assert guards.same_values(x, original)  # NaN matches NaN
    x[2] = 4.0
    assert not guards.same_values(x, original)


def _job(tmp_path) -> WorkerJob:
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    return WorkerJob(mode="evaluate", problem=problem, config=EvalConfig(), cache_dir=tmp_path)


def test_check_unpatched_rejects_a_patched_function(monkeypatch, tmp_path):
    job = _job(tmp_path)
    before = guards.snapshot(job.reference_ops)
    checks: list = []
    check_unpatched(job, before, checks, "the test")  # nothing changed: passes
    assert [(c.name, c.passed) for c in checks] == [("no_monkeypatching", True)]
    monkeypatch.setattr(torch, "allclose", lambda *args, **kwargs: True)
    with pytest.raises(CheckFailed) as failed:
        check_unpatched(job, before, checks, "the test")
    assert failed.value.check == "no_monkeypatching" and "torch.allclose" in failed.value.reason


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
        # A GPT's positions and its last token's row, kept as the reference takes them...
        (
            ["arange", "embedding", "embedding", "index"],
            ["arange", "embedding", "embedding", "add", "index"],
            "",
        ),
        # ...but no more gathers than the reference makes.
        (["index", "index"], ["index", "add"], "2 PyTorch embedding op(s)"),
    ],
)
def test_pytorch_compute_table(candidate_ops, reference_ops, problem):
    found = profiling.pytorch_compute_problems(candidate_ops, reference_ops)
    assert (problem in found) if problem else found == ""


# --- changed_since: the stable_after_sync check itself ------------------------------------------
# Each case writes one place of the outputs between at_return and changed_since, the way work
# left on a stream the caller never waits for lands after forward returned.


def _large() -> torch.Tensor:
    """150000 elements: the sample holds every third one, the fingerprint sees all of them.

    Multiples of 1/16 below 64: their sums are exact in any order, so two (different) elements
    that trade places leave the fingerprint as it was.
    """
    return ((torch.arange(150_000) % 2048 - 1024) / 16).reshape(3000, 50)


def _write_first(outs: list[torch.Tensor]) -> None:
    outs[0].view(-1)[0] += 1.0


def _write_last(outs: list[torch.Tensor]) -> None:
    outs[-1].view(-1)[-1] += 1.0


def _write_outside_the_sample(outs: list[torch.Tensor]) -> None:
    flat = outs[0].view(-1)
    # The sample takes count-1, count-1-step, ...: count-2 is never in it (step 3 here).
    assert flat.numel() > guards.SAMPLE_ELEMENTS
    flat[-2] += 1.0


def _swap_sampled(outs: list[torch.Tensor]) -> None:
    """Two sampled elements trade values: every sum stays, only the sample can tell."""
    flat = outs[0].view(-1)
    step = -(-flat.numel() // guards.SAMPLE_ELEMENTS)
    a, b = flat.numel() - 1, flat.numel() - 1 - step
    flat[a], flat[b] = flat[b].clone(), flat[a].clone()


def _fill_a_nan(outs: list[torch.Tensor]) -> None:
    outs[0].view(-1)[5] = 2.0  # an unwritten (NaN) element written late


def _with_nan() -> torch.Tensor:
    out = torch.randn(64)
    out[3:9] = float("nan")
    return out


@pytest.mark.parametrize(
    ("make", "write"),
    [
        (lambda: [torch.randn(8, 8)], _write_first),
        (lambda: [torch.randn(8, 8), torch.randn(5)], _write_last),  # the last output's last
        (lambda: [_large()], _write_first),
        (lambda: [_large()], _write_last),
        (lambda: [_large()], _write_outside_the_sample),
        (lambda: [_large()], _swap_sampled),
        (lambda: [torch.tensor(1.5)], _write_first),  # a 0-d output
        (lambda: [_with_nan()], _fill_a_nan),
    ],
    ids=["small", "last-output", "large-first", "large-last", "unsampled", "swap", "0-d", "nan"],
)
def test_changed_since_sees_a_write_after_return(make, write):
    outs = make()
    taken = guards.at_return(outs)
    write(outs)
    assert guards.changed_since(taken, outs)


@pytest.mark.parametrize(
    "make",
    [
        lambda: [torch.randn(8, 8)],
        lambda: (torch.randn(8, 8), torch.randn(5)),
        lambda: [_large()],
        lambda: [_with_nan()],  # NaN matches NaN: an unwritten element is no late write
        lambda: [torch.full((3000, 50), float("nan"))],
        lambda: [torch.tensor(1.5), torch.arange(7)],
        lambda: [torch.randn(40, 10).t()[:, ::2]],  # strided
    ],
    ids=["small", "tuple", "large", "some-nan", "all-nan", "0-d-and-int", "strided"],
)
def test_changed_since_is_false_for_outputs_left_alone(make):
    outs = make()
    taken = guards.at_return(outs)
    guards.settle("cpu")
    assert not guards.changed_since(taken, outs)
