"""The offline proposer's CUDA candidates, built and run on a GPU: every kernel path (the fast
path vectorized and not, one row and many, per-channel operands, the general path, bool
inputs and outputs, several outputs) against the reference, in float32 and bfloat16, with the
host wrapper in the C++ file and the kernels in a ``.cu`` file without torch's headers
(``agents.offline.cuda_launch``). The CPU twins of these checks are
tests/test_offline_proposer.py; what the sources say is tests/test_offline_codegen.py.
"""

from __future__ import annotations

import functools
import importlib.util
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from agents.offline import propose_here
from harness.builds.cache import CachedLoader
from harness.problem.cases import make_inputs
from harness.problem.load import problem_from_target
from harness.records import Problem
from tests.conftest import EXAMPLES, ROOT, write_module
from tests.test_offline_proposer import (
    CHANNEL_EPILOGUE,
    KITCHEN_SINK,
    assert_kitchen_sink_paths,
    assert_rounded_like_eager,
    assert_same,
    construct,
)

pytestmark = pytest.mark.gpu

# The per-channel epilogue on larger images, whose rows (a channel's image, in vectors of 4
# floats) are long enough for the rowwise kernel: one row's threads outrun it in its one block
# (915 vectors in 256 threads' 1024), the other's spread over three blocks, the last part empty.
LONG_ROWS = {"channel_rows_61": (60, 61), "channel_rows_100": (100, 100)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], tuple[Problem, types.ModuleType]]:
    """name -> (problem, its candidate built and imported), each built when first asked for."""
    directory = tmp_path_factory.mktemp("offline_cuda")
    targets = {name: str(ROOT / target) for name, target in EXAMPLES.items()}
    targets["kitchen_sink"] = str(write_module(directory, "kitchen_sink", KITCHEN_SINK))
    targets["channel_epilogue"] = str(write_module(directory, "channel_epilogue", CHANNEL_EPILOGUE))
    for name, (height, width) in LONG_ROWS.items():
        source = CHANNEL_EPILOGUE.replace("12, 12", f"{height}, {width}")
        targets[name] = str(write_module(directory, name, source))
    loader = CachedLoader(directory / "cache", "cuda", "float32")

    @functools.cache
    def candidate(name: str) -> tuple[Problem, types.ModuleType]:
        problem = problem_from_target(targets[name], "cuda", None)
        proposal = propose_here(problem)
        assert proposal.candidate is not None, proposal.reason
        path = write_module(directory, f"candidate_{name}", proposal.candidate.source)
        return problem, _imported(path, loader)

    return candidate


def _imported(path: Path, loader: CachedLoader) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"cuda_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    original = cpp_extension.load_inline
    cpp_extension.load_inline = loader  # type: ignore[assignment]
    try:
        spec.loader.exec_module(module)  # trusted source: the proposer's, built in this process
    finally:
        cpp_extension.load_inline = original
    return module


def _on_cuda(problem: Problem, candidate: types.ModuleType, seed: int):
    reference, fused = construct(problem, candidate, seed)
    return reference.cuda(), fused.cuda()


def _cuda(values):
    return [value.cuda() if isinstance(value, torch.Tensor) else value for value in values]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_examples_match_on_cuda(built, name: str) -> None:
    problem, candidate = built(name)
    reference, fused = _on_cuda(problem, candidate, seed=1)
    inputs = _cuda(make_inputs(problem.model_copy(update={"device": "cpu"}), seed=1))
    with torch.no_grad():
        assert_same(fused(*inputs), reference(*inputs))


def test_kitchen_sink_matches_on_every_path_on_cuda(built) -> None:
    problem, candidate = built("kitchen_sink")
    reference, fused = _on_cuda(problem, candidate, seed=5)
    inputs = _cuda(make_inputs(problem.model_copy(update={"device": "cpu"}), seed=5))
    assert_kitchen_sink_paths(fused, reference, inputs, tolerance=2e-5)


def test_kitchen_sink_in_bfloat16_on_cuda(built) -> None:
    problem, candidate = built("kitchen_sink")
    half = problem.model_copy(update={"dtype": "bfloat16"})
    reference, fused = _on_cuda(half, candidate, seed=6)
    inputs = _cuda(make_inputs(half.model_copy(update={"device": "cpu"}), seed=6))
    with torch.no_grad():
        assert_rounded_like_eager(fused(*inputs), reference(*inputs))


def test_per_channel_operands_on_cuda(built) -> None:
    problem, candidate = built("channel_epilogue")
    reference, fused = _on_cuda(problem, candidate, seed=8)
    (x,) = _cuda(make_inputs(problem.model_copy(update={"device": "cpu"}), seed=8))
    cases = {
        "traced": x,
        "a larger batch": torch.randn(5, 3, 12, 12, device="cuda"),
        "one image": torch.randn(1, 3, 12, 12, device="cuda"),
        "channels last": x.contiguous(memory_format=torch.channels_last),  # general path
    }
    with torch.no_grad():
        for name, inputs in cases.items():
            got, kernels = _profiled(fused, inputs)
            torch.testing.assert_close(got, reference(inputs), rtol=1e-5, atol=1e-5, msg=name)
            assert "_rowwise" not in kernels, (name, kernels)  # rows of 36 vectors


@pytest.mark.parametrize("name", list(LONG_ROWS))
def test_per_channel_operands_on_long_rows_take_the_rowwise_kernel(built, name: str) -> None:
    problem, candidate = built(name)
    reference, fused = _on_cuda(problem, candidate, seed=9)
    (x,) = _cuda(make_inputs(problem.model_copy(update={"device": "cpu"}), seed=9))
    with torch.no_grad():
        for images in (x, x[:1], torch.cat([x, x, x])):
            got, kernels = _profiled(fused, images)
            torch.testing.assert_close(got, reference(images), rtol=1e-5, atol=1e-5)
            assert "_rowwise" in kernels, kernels


def _profiled(module: torch.nn.Module, inputs: torch.Tensor) -> tuple[torch.Tensor, str]:
    """The module's output, and the names of the CUDA kernels its call ran."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        got = module(inputs)
        torch.cuda.synchronize()
    return got, " ".join(event.name for event in prof.events())
