"""Channels-last convolutions on a GPU (agents.offline.conv_layout): built candidates of 2-d
conv epilogues match their reference module in float32, float16 and bfloat16, at sizes no tile
divides (channels, positions) and on batches of 1 and 3, with their input made NHWC by the
extension's transpose and their epilogue read NHWC and written NCHW contiguous, so that a
``.view`` after it works; a transposed conv, forward's own ``F.conv2d``, a conv without bias
(which keeps the NCHW path) and a conv given a hook after construction (the original forward)
match too. What is written, without a GPU: tests/test_offline_conv_layout.py."""

from __future__ import annotations

import copy
import functools
import types
from collections.abc import Callable

import pytest
import torch

from agents.offline import propose_here
from harness.builds.cache import CachedLoader
from harness.problem.cases import make_inputs
from harness.problem.load import problem_from_target
from harness.records import Problem
from tests.conftest import write_module
from tests.test_offline_conv_layout import HEADER, conv_module
from tests.test_offline_cuda import _imported, _profiled
from tests.test_offline_proposer import construct

pytestmark = pytest.mark.gpu

MODULES = {
    # 37 channels (tiles of 32: the second holds 5), 11 x 9 positions (tiles of 32: 4, the
    # last part empty), a per-channel operand of each spelling
    "odd_epilogue": conv_module(
        "self.conv = nn.Conv2d(3, 37, 3)\n"
        "        self.scale = nn.Parameter(torch.randn(37, 1, 1))\n"
        "        self.shift = nn.Parameter(torch.randn(1, 37, 1, 1))",
        "return F.gelu(F.leaky_relu(self.conv(x) * self.scale + self.shift, 0.1))",
        "torch.randn(3, 3, 13, 11)",
    ),
    # 6 channels (tiles of 8), every option of the transposed conv set, a one-value operand
    # (of the conv's dtype: a float32 one beside a 16-bit conv is not read by the kernels)
    "transposed": conv_module(
        "self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, dilation=2)",
        "x = self.up(x) + 0.5\n"
        "        x = torch.min(x, torch.tensor(0.0, device=x.device, dtype=x.dtype))\n"
        "        return F.gelu(x) * 2.0",
        "torch.randn(3, 4, 7, 9)",
    ),
    # the epilogue's output viewed as rows for a linear layer
    "view_after": conv_module(
        "self.conv = nn.Conv2d(3, 16, 3)\n"
        "        self.bias = nn.Parameter(torch.randn(16, 1, 1))\n"
        "        self.fc = nn.Linear(16 * 8 * 10, 5)",
        "y = torch.relu(self.conv(x)) + self.bias\n        return self.fc(y.view(y.size(0), -1))",
        "torch.randn(3, 3, 10, 12)",
    ),
    # forward's own F.conv2d, read as the kernel's second input
    "functional": conv_module(
        "self.weight = nn.Parameter(torch.randn(8, 3, 3, 3))\n"
        "        self.scale = nn.Parameter(torch.randn(8, 1, 1))",
        "return torch.relu(self.scale * F.conv2d(x, self.weight, padding=1)) - 1.0",
        "torch.randn(3, 3, 9, 14)",
    ),
    "no_bias": conv_module(
        "self.conv = nn.Conv2d(3, 8, 3, bias=False)",
        "return torch.relu(self.conv(x)) * 2.0",
        "torch.randn(3, 3, 12, 12)",
    ),
}
NCHW_ONLY = {"no_bias"}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str], tuple[Problem, types.ModuleType]]:
    directory = tmp_path_factory.mktemp("conv_layout_cuda")
    loader = CachedLoader(directory / "cache", "cuda", "float32")

    @functools.cache
    def candidate(name: str) -> tuple[Problem, types.ModuleType]:
        target = write_module(directory, name, HEADER + MODULES[name])
        problem = problem_from_target(f"{target}:Model", "cuda", None)
        proposal = propose_here(problem)
        assert proposal.candidate is not None, proposal.reason
        assert ("channels-last" in proposal.reason) == (name not in NCHW_ONLY), proposal.reason
        path = write_module(directory, f"candidate_{name}", proposal.candidate.source)
        return problem, _imported(path, loader)

    return candidate


@pytest.fixture(autouse=True)
def strict_float32(monkeypatch):
    """cuDNN's default TF32 rounds differently in each layout; the values are compared in
    float32 (the harness holds a TF32 reference to its own TF32 error)."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)


def _case(problem: Problem, candidate, dtype: str, seed: int):
    typed = problem.model_copy(update={"dtype": dtype})
    reference, fused = construct(typed, candidate, seed)
    exact = copy.deepcopy(reference).double()
    (x,) = make_inputs(typed.model_copy(update={"device": "cpu"}), seed)
    return reference.cuda(), fused.cuda(), exact.cuda(), x.cuda()


def assert_like_eager(ours: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor) -> None:
    """Our error against float64 at most twice eager's own (its dtype's rounding)."""
    assert ours.dtype == eager.dtype and ours.shape == eager.shape
    assert ours.is_contiguous() and ours.stride() == eager.stride()

    def error(values: torch.Tensor) -> float:
        return float((values.double() - exact).norm() / exact.norm())

    assert error(ours) <= 2 * error(eager) + 1e-6, (error(ours), error(eager))


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("name", list(MODULES))
def test_conv_epilogues_match_in_nchw_on_cuda(built, name: str, dtype: str) -> None:
    problem, candidate = built(name)
    reference, fused, exact, x = _case(problem, candidate, dtype, seed=3)
    with torch.no_grad():
        for images in (x[:1], x[:3]):
            ours, kernels = _profiled(fused, images)
            assert_like_eager(ours, reference(images), exact(images.double()))
            tiled = "fused_0_nhwc" in kernels and "channels_last_tiles" in kernels
            assert tiled == (name not in NCHW_ONLY), kernels


def test_the_epilogues_output_is_nchw_for_what_follows(built) -> None:
    """A ``.view`` of the output after the module works, as on the reference's."""
    problem, candidate = built("odd_epilogue")
    reference, fused, _, x = _case(problem, candidate, "float32", seed=4)
    with torch.no_grad():
        ours, theirs = fused(x), reference(x)
        assert ours.is_contiguous() and not ours.is_contiguous(memory_format=torch.channels_last)
        torch.testing.assert_close(ours.view(x.shape[0], -1), theirs.view(x.shape[0], -1))


def test_a_hook_added_to_the_conv_runs_the_original_forward(built) -> None:
    problem, candidate = built("odd_epilogue")
    reference, fused, _, x = _case(problem, candidate, "float32", seed=5)
    for model in (reference, fused):
        model.conv.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))
    with torch.no_grad():
        ours, kernels = _profiled(fused, x)
        torch.testing.assert_close(ours, reference(x), rtol=1e-5, atol=1e-5)
    assert "fused_0" not in kernels and "channels_last_tiles" not in kernels
