"""The offline proposer's candidates, built for real on the CPU and checked against the
reference modules (outputs, every path, dtypes, no pointwise PyTorch op left). What it decides
and writes, without building, is tests/test_offline_codegen.py.

Builds are the slow part (tens of seconds each on a small machine), so the four candidates that
are compiled (three examples and one module that uses every supported op) are built once per
module, in parallel processes; torch's extension cache makes later runs quick.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension
from torch.utils._python_dispatch import TorchDispatchMode

from agents.offline import Proposal, propose
from harness.builds.cache import CachedLoader, default_cache_dir
from harness.problem.cases import build_reference, make_inputs, perturb_parameters
from harness.problem.load import DTYPES, problem_from_target
from harness.problem.user_code import init_arguments
from harness.problem.variants import resized_inputs
from harness.records import Problem
from tests.conftest import EXAMPLES, ROOT, embedded_source, write_module

# Every kind of op and broadcast the kernels support, in three chains: bias [N] and 0-dim
# parameter, a [B, T, 1] column, a bool intermediate returned as an output, a Python number
# computed from a shape, an in-place op on a matmul result, a bool input, intermediates read
# outside their kernel, and one kernel with eight outputs of the vectorized math functions.
KITCHEN_SINK = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import Linear

ALPHA = 0.7


class Model(nn.Module):
    def __init__(self, dim: int):
        super(Model, self).__init__()
        self.proj = Linear(dim, dim)
        self.scale = nn.Parameter(torch.randn(dim))
        self.alpha = nn.Parameter(torch.tensor(ALPHA))
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)

    def forward(self, x, row_gate, mask):
        h = self.proj(x)
        a = self.drop(self.act(h * self.scale + self.alpha))
        positive = a > 0.1
        b = torch.where(positive, a, F.leaky_relu(a, 0.2))
        c = torch.clamp(b, min=-1.5) * torch.sigmoid(row_gate)
        y = c / (1.0 + x.shape[-1] ** -0.5) - torch.rsqrt(h.abs() + 1e-3)
        m = torch.matmul(y, self.proj.weight)
        m.mul_(0.5)
        z = F.hardswish(m) + F.softplus(m, beta=2.0) - torch.minimum(m, c) ** 2
        z = z + F.relu6(m).square() + F.hardsigmoid(m) * F.mish(m) + torch.maximum(m, 0.5 * h)
        z = torch.where(mask, z, -z) / (1 + torch.exp(-m))
        u = x * 1.5
        return (z, c, positive, torch.exp(u), torch.tanh(u), torch.erf(u), torch.log(u.abs()),
                torch.expm1(u), torch.log1p(u.abs()), F.gelu(u, approximate="tanh"), F.silu(u))


def get_inputs():
    return [4 * torch.randn(4, 33, 64), torch.randn(4, 33, 1), torch.rand(4, 33, 64) > 0.5]


def get_init_inputs():
    return [64]
"""
# A conv's epilogue with broadcast operands (KernelBench level 2's shape): a per-channel bias
# and scale [C, 1, 1], and a residual [C, H, W] shared by the batch. The fast path reads them
# by row (rows N x C, one value each; the residual wrapped every C rows), not by the general
# path's per-element division by every dimension.
CHANNEL_EPILOGUE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))
        self.scale = nn.Parameter(torch.randn(channels, 1, 1))
        self.residual = nn.Parameter(torch.randn(channels, 12, 12))

    def forward(self, x):
        y = self.conv(x)
        return F.gelu(F.leaky_relu(y * self.scale + self.bias, 0.1) + self.residual)


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]


def get_init_inputs():
    return [16]
"""
# Constants forward makes of Python numbers (KernelBench level2 31's
# ``torch.min(x, torch.tensor(self.constant_value))``): torch.fx keeps each as an attribute of
# the module it traced, which the candidate's copy of the module does not have.
TRACED_CONSTANTS = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, low: float):
        super().__init__()
        self.linear = nn.Linear(16, 16)
        self.low = low

    def forward(self, x):
        y = torch.min(self.linear(x), torch.tensor(self.low)) * 2.0 + 1.0  # a kernel's number
        return y, torch.atan2(y, torch.tensor([1.0, -1.0] * 8))  # a PyTorch call reads it


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [0.25]
"""

POINTWISE_ATEN = {
    "add",
    "sub",
    "mul",
    "div",
    "neg",
    "pow",
    "relu",
    "gelu",
    "silu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "abs",
    "sqrt",
    "rsqrt",
    "clamp",
    "clamp_min",
    "clamp_max",
    "hardtanh",
    "leaky_relu",
    "where",
    "minimum",
    "maximum",
    "erf",
    "expm1",
    "log1p",
    "hardswish",
    "hardsigmoid",
    "softplus",
    "mish",
    "gt",
    "lt",
    "ge",
    "le",
    "eq",
    "ne",
    "square",
    "reciprocal",
}
# Candidates are built through the harness's own loader, so the build cache (keyed by content)
# is shared with the tests that evaluate the same proposals end to end.
_BUILD_SCRIPT = (
    "import importlib.util, sys; from torch.utils import cpp_extension; "
    "from harness.builds.cache import CachedLoader, default_cache_dir; "
    "cpp_extension.load_inline = CachedLoader(default_cache_dir(), 'cpu', 'float32'); "
    "spec = importlib.util.spec_from_file_location('candidate', sys.argv[1]); "
    "spec.loader.exec_module(importlib.util.module_from_spec(spec))"
)


def import_candidate(path: Path) -> types.ModuleType:
    """Import a candidate whose kernels are already in the build cache."""
    spec = importlib.util.spec_from_file_location(f"candidate_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    original = cpp_extension.load_inline
    cpp_extension.load_inline = CachedLoader(default_cache_dir(), "cpu", "float32")
    try:
        spec.loader.exec_module(module)
    finally:
        cpp_extension.load_inline = original
    return module


def build_in_parallel(paths: list[Path]) -> None:
    """Compile every candidate in its own process (load_inline releases nothing in-process)."""

    def build(path: Path) -> None:
        result = subprocess.run(
            [sys.executable, "-c", _BUILD_SCRIPT, str(path)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            # the caller's path after the checkout's (packages installed with --target)
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join(
                    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
                ),
            },
        )
        assert result.returncode == 0, f"{path.name} failed to build:\n{result.stderr[-4000:]}"

    with ThreadPoolExecutor(max_workers=max(1, min(len(paths), os.cpu_count() or 1))) as pool:
        list(pool.map(build, paths))


class AtenRecorder(TorchDispatchMode):
    """Names of the aten ops run while active (C++ calls from our kernels' wrappers too)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__.rstrip("_"))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, tuple[Problem, Proposal, types.ModuleType]]:
    directory = tmp_path_factory.mktemp("offline")
    targets = dict(EXAMPLES)
    targets["kitchen_sink"] = str(write_module(directory, "kitchen_sink", KITCHEN_SINK))
    targets["channel_epilogue"] = str(write_module(directory, "channel_epilogue", CHANNEL_EPILOGUE))
    targets["traced_constants"] = str(write_module(directory, "traced_constants", TRACED_CONSTANTS))
    proposals = {}
    for name, target in targets.items():
        problem = problem_from_target(str(ROOT / target), "cpu", None)
        proposal = propose(problem)
        assert proposal.candidate is not None, proposal.reason
        path = write_module(directory, f"candidate_{name}", proposal.candidate.source)
        proposals[name] = (problem, proposal, path)
    build_in_parallel([path for _, _, path in proposals.values()])
    return {
        name: (problem, proposal, import_candidate(path))
        for name, (problem, proposal, path) in proposals.items()
    }


def construct(problem: Problem, candidate: types.ModuleType, seed: int):
    reference = build_reference(problem, seed=0)
    perturb_parameters(reference, seed)
    args, kwargs = init_arguments(problem)
    fused = candidate.ModelNew(*args, **kwargs).to(DTYPES[problem.dtype]).eval()
    fused.load_state_dict(reference.state_dict(), strict=True)
    return reference, fused


def assert_same(fused_outputs, reference_outputs, tolerance: float = 1e-5) -> None:
    if isinstance(reference_outputs, torch.Tensor):
        fused_outputs, reference_outputs = (fused_outputs,), (reference_outputs,)
    assert len(fused_outputs) == len(reference_outputs)
    for ours, theirs in zip(fused_outputs, reference_outputs, strict=True):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=tolerance, atol=tolerance)


# --- built candidates --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_candidate_matches_reference(built, name: str) -> None:
    problem, proposal, candidate = built[name]
    assert proposal.fused_chains == 1
    for seed in (1, 2):
        reference, fused = construct(problem, candidate, seed)
        inputs = make_inputs(problem, seed)
        with torch.no_grad():
            assert_same(fused(*inputs), reference(*inputs))
            resized = resized_inputs(inputs, variant=1, seed=seed)
            assert resized is not None
            assert_same(fused(*resized), reference(*resized))


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXAMPLES))
def test_example_candidate_runs_no_pointwise_pytorch_op(built, name: str) -> None:
    problem, _, candidate = built[name]
    _, fused = construct(problem, candidate, seed=1)
    recorder = AtenRecorder()
    with torch.no_grad(), recorder:
        fused(*make_inputs(problem, seed=1))
    assert not POINTWISE_ATEN & set(recorder.names), recorder.names


@pytest.mark.slow
def test_residual_gate_general_path_on_non_contiguous_input(built) -> None:
    problem, _, candidate = built["residual_gate"]
    reference, fused = construct(problem, candidate, seed=3)
    x = torch.randn(1024, 5, 7).permute(1, 2, 0)  # [5, 7, 1024], rows not evenly strided
    assert not x.is_contiguous()
    with torch.no_grad():
        assert_same(fused(x), reference(x))


@pytest.mark.slow
def test_swiglu_reads_row_strided_chunks(built) -> None:
    problem, _, candidate = built["swiglu"]
    reference, fused = construct(problem, candidate, seed=4)
    projected = torch.randn(33, 4097)[:, 1:]  # odd row stride and offsets
    with torch.no_grad():
        assert_same(fused(projected), reference(projected))


@pytest.mark.slow
def test_kitchen_sink_matches_reference_on_every_path(built) -> None:
    problem, proposal, candidate = built["kitchen_sink"]
    assert proposal.fused_chains == 3, proposal.reason
    reference, fused = construct(problem, candidate, seed=5)
    assert_kitchen_sink_paths(fused, reference, make_inputs(problem, seed=5), tolerance=2e-6)


def assert_kitchen_sink_paths(fused, reference, inputs: list[torch.Tensor], tolerance: float):
    """The kitchen sink on every path its kernels have: the traced shapes, a non-contiguous
    input, a full gate instead of a column, sliced rows, a broadcast batch."""
    x, row_gate, mask = inputs
    cases = {
        "traced shapes": [x, row_gate, mask],
        "non-contiguous x": [
            torch.randn(4, 64, 33, device=x.device).transpose(1, 2) * 4,
            row_gate,
            mask,
        ],
        "full row gate": [x, torch.randn(4, 33, 64, device=x.device), mask],
        "sliced rows": [x[:, :7], row_gate[:, :7], mask[:, :7]],
        "broadcast batch": [x[:2], row_gate[:1], mask[:2]],
    }
    with torch.no_grad():
        for name, case in cases.items():
            ours, theirs = fused(*case), reference(*case)
            assert theirs[2].dtype == torch.bool, name
            assert_same(ours, theirs, tolerance=tolerance)


@pytest.mark.slow
def test_kitchen_sink_in_bfloat16_rounds_like_eager(built) -> None:
    """Every intermediate is rounded to bfloat16 as eager PyTorch does, so even exp(1.5 x) of
    large x stays within bfloat16's tolerance (1.6e-2 relative norm in the harness)."""
    problem, _, candidate = built["kitchen_sink"]
    half = problem.model_copy(update={"dtype": "bfloat16"})
    for seed in (6, 7):
        reference, fused = construct(half, candidate, seed)
        inputs = make_inputs(half, seed)
        with torch.no_grad():
            assert_rounded_like_eager(fused(*inputs), reference(*inputs))


def assert_rounded_like_eager(ours, theirs) -> None:
    """bfloat16 outputs within 4e-3 relative norm of eager's; bools flip on under 1%."""
    for index, (mine, eager) in enumerate(zip(ours, theirs, strict=True)):
        assert mine.dtype == eager.dtype
        if eager.dtype == torch.bool:  # a > 0.1 may flip where float and bfloat16 disagree
            assert (mine != eager).float().mean() < 0.01
            continue
        error = (mine.float() - eager.float()).norm() / eager.float().norm()
        assert error < 4e-3, (index, float(error))


@pytest.mark.slow
def test_per_channel_operands_take_the_fast_path_and_match_on_every_layout(built) -> None:
    problem, proposal, candidate = built["channel_epilogue"]
    assert proposal.fused_chains == 1, proposal.reason
    cpp = embedded_source(proposal.candidate.source, "_CPP_SOURCE")
    # rows x cols at split 2 (N x C rows of H x W): the fast path, not only the general one
    assert "fused_0_fast<scalar_t>(" in cpp and "sizes, {2});" in cpp
    reference, fused = construct(problem, candidate, seed=8)
    (x,) = make_inputs(problem, seed=8)
    cases = {
        "traced": x,
        "a larger batch": torch.randn(5, 3, 12, 12),
        "one image": torch.randn(1, 3, 12, 12),
        "channels last": x.contiguous(memory_format=torch.channels_last),  # general path
    }
    with torch.no_grad():
        for name, inputs in cases.items():
            torch.testing.assert_close(fused(inputs), reference(inputs), rtol=1e-5, atol=1e-5,
                                       msg=name)  # fmt: skip


@pytest.mark.slow
def test_constants_forward_makes_are_numbers_in_kernels_and_made_again_for_pytorch(built) -> None:
    problem, proposal, candidate = built["traced_constants"]
    source = proposal.candidate.source
    assert "_tensor_constant0" not in source  # the kernel's: min(., 0.25) in its code
    assert "torch.tensor([1.0, -1.0" in source  # atan2's, made on every call as forward did
    for seed in (1, 2):
        reference, fused = construct(problem, candidate, seed)
        inputs = make_inputs(problem, seed)
        with torch.no_grad():
            assert_same(fused(*inputs), reference(*inputs))
