"""The offline candidate's guards, built and run: two candidates (a split by an attribute, and
dropout as a module and as a function), each also written without its guards, imported through
the harness's own loader, which counts the calls into their kernels. The kernel runs on the
traced values; the reference's forward, and its outputs, where the attribute, the mode or the
split dimension changed; and the harness's verification runs the kernel path, so a guard that
falls back on the verified cases fails verification instead of passing it.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

import agents.offline.emit as emit
from harness.builds.cache import CachedLoader, default_cache_dir
from harness.evaluate import Evaluator
from harness.problem.user_code import reference_class
from harness.records import Candidate, Status
from tests.conftest import fast_config, write_module
from tests.test_offline_guards import DROPOUT, RANKS, SHAPES, SPLIT, problem, source_of
from tests.test_offline_proposer import assert_same, build_in_parallel


class Built:
    """A problem's candidate, with and without its guards, built and imported; ``calls``
    counts the calls into the kernels (the harness's loader counts them the same way)."""

    def __init__(self, directory: Path, name: str, body: str) -> None:
        self.problem = problem(directory, name, body)
        self.source = source_of(self.problem)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(emit, "_guard", lambda *args: [])
            self.unguarded_source = source_of(self.problem)
        self.paths = [
            write_module(directory, f"candidate_{name}", self.source),
            write_module(directory, f"unguarded_{name}", self.unguarded_source),
        ]
        self.loader = CachedLoader(default_cache_dir(), "cpu", "float32")
        self.reference_class = reference_class(self.problem)

    def load(self) -> None:
        self.guarded, self.unguarded = (_import(path, self.loader) for path in self.paths)

    @property
    def calls(self) -> int:
        return sum(self.loader.calls.values())

    def pair(self, *args, unguarded: bool = False):
        """The reference and the candidate, built with ``args``, on the same parameters."""
        reference = self.reference_class(*args)
        candidate = (self.unguarded if unguarded else self.guarded).ModelNew(*args)
        candidate.load_state_dict(reference.state_dict(), strict=True)
        return reference.eval(), candidate.eval()


def _import(path: Path, loader: CachedLoader) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    original = cpp_extension.load_inline
    cpp_extension.load_inline = loader
    try:
        spec.loader.exec_module(module)
    finally:
        cpp_extension.load_inline = original
    return module


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Built]:
    directory = tmp_path_factory.mktemp("guards")
    worlds = {
        "split": Built(directory, "split", SPLIT),
        "dropout": Built(directory, "dropout", DROPOUT),
        "shapes": Built(directory, "shapes", SHAPES),
        "ranks": Built(directory, "ranks", RANKS),
    }
    build_in_parallel([world.paths[0] for world in worlds.values()])
    build_in_parallel([world.paths[1] for world in worlds.values()])  # the same C++: cached
    for world in worlds.values():
        world.load()
    return worlds


def run(world: Built, module, *inputs, seed: int | None = None):
    """Outputs and how many kernel calls the forward made."""
    before = world.calls
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        outputs = module(*inputs)
    return outputs, world.calls - before


@pytest.mark.slow
def test_split_runs_its_kernel_on_the_traced_width(built) -> None:
    world = built["split"]
    reference, fused = world.pair(32)
    for inputs in ([torch.randn(8, 16, 64)], [torch.randn(3, 5, 64)]):  # another batch too
        ours, calls = run(world, fused, *inputs)
        assert calls == 1
        assert_same(ours, reference(*inputs))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["constructed", "attribute set"])
def test_split_by_another_width_runs_the_original(built, how: str) -> None:
    world = built["split"]
    reference, fused = world.pair(16)
    if how == "attribute set":
        reference, fused = world.pair(32)
        reference.width = fused.width = 16
    x = torch.randn(8, 16, 32)
    ours, calls = run(world, fused, x)
    assert calls == 0
    assert_same(ours, reference(x))


@pytest.mark.slow
def test_split_into_another_count_fails_as_the_original_does(built) -> None:
    world = built["split"]
    reference, fused = world.pair(32)
    x = torch.randn(8, 16, 96)  # three parts of 32: the unpacking into two fails
    with pytest.raises(ValueError, match="too many values to unpack") as theirs:
        reference(x)
    with pytest.raises(ValueError) as ours:
        run(world, fused, x)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.slow
def test_dropout_in_eval_runs_its_kernel(built) -> None:
    world = built["dropout"]
    reference, fused = world.pair(32)
    x = torch.randn(64, 32)
    ours, calls = run(world, fused, x)
    assert calls == 1
    assert_same(ours, reference(x))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["module", "dropout submodule only"])
def test_dropout_in_train_mode_runs_the_original(built, which: str) -> None:
    world = built["dropout"]
    reference, fused = world.pair(32)
    for module in (reference, fused):
        (module if which == "module" else module.drop).train()
    x = torch.randn(64, 32)
    ours, calls = run(world, fused, x, seed=3)
    theirs, _ = run(world, reference, x, seed=3)
    assert calls == 0
    assert_same(ours, theirs)
    assert not torch.allclose(theirs, reference.eval()(x))  # dropout did drop


@pytest.mark.slow
def test_a_trace_knowing_its_shapes_runs_its_kernels_where_its_branches_hold(built) -> None:
    """SHAPES was traced at [8, 16, 32] with no mask and scale on: its kernels run there and at
    another batch and width; a single position (``n_ctx > 1`` fails), a mask or scale off each
    run the original forward, with its result."""
    world = built["shapes"]
    reference, fused = world.pair(32, 4)
    for x in (torch.randn(8, 16, 32), torch.randn(3, 5, 32)):
        ours, calls = run(world, fused, x)
        assert calls >= 1
        assert_same(ours, reference(x))
    x = torch.randn(8, 16, 32)
    for args in ([torch.randn(8, 1, 32)], [x, torch.randn(8, 16, 4, 8)], [x, None, False]):
        ours, calls = run(world, fused, *args)
        assert calls == 0, [getattr(arg, "shape", arg) for arg in args]
        assert_same(ours, reference(*args))


@pytest.mark.slow
def test_a_rank_and_a_length_taken_from_sizes_are_checked(built) -> None:
    """RANKS took its rank (3) and a length (6) from the traced sizes, each checked right
    after it is made (after the kernel that makes it): another batch keeps both, and the
    kernel's result is returned; a kept dimension (rank 4) or another length return the
    original forward's, where the same kernel without its checks returns another."""
    world = built["ranks"]
    reference, fused = world.pair()
    _, unguarded = world.pair(unguarded=True)
    for shape, holds in [((4, 1, 6, 8), True), ((3, 1, 6, 8), True), ((4, 2, 6, 8), False),
                         ((4, 1, 5, 8), False)]:  # fmt: skip
        x = torch.randn(*shape)
        ours, calls = run(world, fused, x)
        assert calls == 1, shape
        assert_same(ours, reference(x))
        theirs, _ = run(world, unguarded, x)
        assert (theirs.shape == ours.shape and torch.allclose(theirs, ours)) is holds, shape


@pytest.mark.slow
def test_without_its_guards_the_kernel_computes_something_else(built) -> None:
    """The same candidate with the guards left out: what the tests above catch."""
    split = built["split"]
    reference, unguarded = split.pair(32, unguarded=True)
    x = torch.randn(8, 16, 96)
    with pytest.raises(ValueError):
        reference(x)
    assert run(split, unguarded, x)[0].shape == (8, 16, 32)  # silently two of three parts
    dropout = built["dropout"]
    reference, unguarded = dropout.pair(32, unguarded=True)
    reference.train(), unguarded.train()
    x = torch.randn(64, 32)
    ours, calls = run(dropout, unguarded, x, seed=3)
    theirs, _ = run(dropout, reference, x, seed=3)
    assert calls == 1 and not torch.allclose(ours, theirs)  # no dropout at all
    shapes = built["shapes"]
    reference, unguarded = shapes.pair(32, 4, unguarded=True)
    x = torch.randn(8, 16, 32)
    ours, calls = run(shapes, unguarded, x, None, False)
    assert calls >= 1 and not torch.allclose(ours, reference(x, None, False))  # scaled anyway
    x = torch.randn(8, 1, 32)
    ours, calls = run(shapes, unguarded, x)
    assert calls >= 1 and not torch.allclose(ours, reference(x))  # the n_ctx > 1 branch anyway


@pytest.mark.slow
def test_verification_runs_the_kernel_and_sees_a_guard_that_falls_back(built) -> None:
    """The harness verifies the kernel path (its own kernel called on every case), so a
    guard that does not hold on the verified cases makes the candidate fail, not pass."""
    world = built["split"]
    evaluator = Evaluator(fast_config(), seed=1)
    result = evaluator.evaluate(world.problem, Candidate(source=world.source, origin="offline"))
    assert result.status is Status.ok, result.reason
    assert any(check.name == "launches_own_kernel" and check.passed for check in result.checks)
    assert "self.width == 32" in world.source
    wrong = world.source.replace("self.width == 32", "self.width == 31")
    result = evaluator.evaluate(world.problem, Candidate(source=wrong, origin="offline"))
    assert result.status is Status.rejected
    failed = {check.name for check in result.checks if not check.passed}
    assert failed & {"launches_own_kernel", "no_pytorch_compute"}, result.checks
