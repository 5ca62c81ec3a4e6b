"""The offline proposer's channels-last convolutions (agents.offline.layouts): which
convolutions go channels-last and which kernels then iterate in memory order, and a built
candidate doing so matching its reference on every input layout."""

from __future__ import annotations

import pytest
import torch

from agents.offline import layouts, propose_here
from agents.offline.grouping import fusion_groups
from agents.offline.layouts import plan_layouts
from agents.offline.trace import trace
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import problem_from_target
from harness.static.native import check_native
from harness.static.python import check_python
from tests.conftest import write_module
from tests.test_offline_proposer import build_in_parallel, construct, import_candidate

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


"""
# KernelBench level 2 problem 93's shape, with every option of the transposed conv set: its
# bias and the 0-d tensor made on the output's device join one kernel.
TRANSPOSED = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, dilation=2)

    def forward(self, x):
        x = self.up(x) + 0.5
        x = torch.min(x, torch.tensor(0.0, device=x.device))
        return F.gelu(x) * 2.0


def get_inputs():
    return [torch.randn(2, 4, 7, 9)]
"""
# The conv's own output is returned too: PyTorch keeps adding its bias.
CONV_RETURNED = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        y = self.conv(x)
        return y, torch.relu(y) * 2.0


def get_inputs():
    return [torch.randn(2, 3, 10, 10)]
"""
# A conv and its per-channel epilogue (KernelBench level 2's shape): channels-last, and the
# epilogue in N, H, W, C order, where scale and bias are rows of C values.
CONV_EPILOGUE = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3)
        self.scale = nn.Parameter(torch.randn(16, 1, 1))
        self.bias = nn.Parameter(torch.randn(16, 1, 1))

    def forward(self, x):
        return F.gelu(F.leaky_relu(self.conv(x) * self.scale + self.bias, 0.1))


def get_inputs():
    return [torch.randn(2, 3, 12, 12)]
"""
CONV3D = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self.shift = nn.Parameter(torch.randn(8, 1, 1, 1))

    def forward(self, x):
        return F.gelu(torch.clamp(F.leaky_relu(self.conv(x), 0.2) + self.shift, -1.0, 1.0))


def get_inputs():
    return [torch.randn(2, 3, 6, 8, 8)]
"""
FUNCTIONAL = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 4, 3, 3))

    def forward(self, x):
        return torch.relu(F.conv2d(x, self.weight, padding=1)) * 2.0


def get_inputs():
    return [torch.randn(2, 4, 10, 10)]
"""
GROUPED = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, groups=2)

    def forward(self, x):
        return torch.relu(self.conv(x)) + 1.0


def get_inputs():
    return [torch.randn(2, 4, 10, 10)]
"""
# A [C, H, W] operand: in N, H, W, C order its rows are not contiguous.
SPATIAL_RESIDUAL = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.residual = nn.Parameter(torch.randn(8, 10, 10))

    def forward(self, x):
        return torch.relu(self.conv(x) + self.residual)


def get_inputs():
    return [torch.randn(2, 3, 10, 10)]
"""
# The input itself, full size and NCHW, is read beside the conv's output.
INPUT_BESIDE = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x) + x)


def get_inputs():
    return [torch.randn(2, 8, 10, 10)]
"""
# Two kernels read the conv: one could iterate channels-last, the other (with the NCHW input)
# cannot, so the conv stays NCHW and neither kernel reorders.
TWO_READERS = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        a = torch.sigmoid(y) * 3.0
        return torch.matmul(a, a), torch.tanh(y) + x


def get_inputs():
    return [torch.randn(2, 8, 10, 10)]
"""


def planned(tmp_path, source: str, device: str = "cuda", dtype: torch.dtype = torch.bfloat16):
    path = write_module(tmp_path, "model", HEADER + source)
    problem = problem_from_target(f"{path}:Model", "cpu", None)
    reference = build_reference(problem, seed=0)
    traced = trace(reference, make_inputs(problem, seed=0), torch.float32)
    nodes = list(traced.graph_module.graph.nodes)
    groups = fusion_groups(nodes, traced.ops)
    return plan_layouts(groups, reference, device, dtype), groups


def test_a_conv_and_its_per_channel_epilogue_go_channels_last(tmp_path) -> None:
    plan, groups = planned(tmp_path, CONV_EPILOGUE)
    assert [node.target for node in plan.convs] == ["conv"]
    assert plan.orders == {tuple(groups[0]): (0, 2, 3, 1)}


@pytest.mark.parametrize(
    ("source", "order"), [(CONV3D, (0, 2, 3, 4, 1)), (FUNCTIONAL, (0, 2, 3, 1))]
)
def test_conv3d_and_functional_convs_go_channels_last(tmp_path, source: str, order) -> None:
    plan, groups = planned(tmp_path, source)
    assert len(plan.convs) == 1
    assert list(plan.orders.values()) == [order]


@pytest.mark.parametrize("source", [GROUPED, SPATIAL_RESIDUAL, INPUT_BESIDE, TWO_READERS])
def test_convs_whose_readers_cannot_iterate_in_memory_order_stay_as_they_are(
    tmp_path, source: str
) -> None:
    plan, _ = planned(tmp_path, source)
    assert plan.convs == frozenset() and plan.orders == {}


def test_the_cuda_candidate_passes_the_native_gate(tmp_path, monkeypatch) -> None:
    # float32: the gate's strictest (no reduced-precision names in the source)
    monkeypatch.setattr(layouts, "CHANNELS_LAST_DTYPES", {torch.float32})
    path = write_module(tmp_path, "model", HEADER + CONV_EPILOGUE)
    problem = problem_from_target(f"{path}:Model", "cuda", None)
    source = propose_here(problem).candidate.source
    cuda = source.split('_CUDA_SOURCE = r"""', 1)[1].split('"""', 1)[0]
    declarations = source.split('_CPP_SOURCE = r"""', 1)[1].split('"""', 1)[0]
    assert "at::Tensor kp_channels_last(const at::Tensor& x);" in declarations
    assert "channels_last_tiles<scalar_t><<<" in cuda
    assert check_native(declarations + cuda, "float32") == []
    assert check_python(source, problem.class_name, "float32") == []


def test_cpu_and_float32_candidates_keep_their_layout(tmp_path) -> None:
    plan, _ = planned(tmp_path, CONV_EPILOGUE, device="cpu")
    assert plan.convs == frozenset() and plan.orders == {}
    plan, _ = planned(tmp_path, CONV_EPILOGUE, dtype=torch.float32)  # TF32 convs: see layouts
    assert plan.convs == frozenset() and plan.orders == {}


def forward_of(
    tmp_path, source: str, device: str = "cuda", dtype: str = "bfloat16"
) -> tuple[str, str]:
    path = write_module(tmp_path, "model", HEADER + source)
    proposal = propose_here(problem_from_target(f"{path}:Model", device, dtype))
    assert proposal.candidate is not None, proposal.reason
    text = proposal.candidate.source
    return proposal.reason, text[text.index("    def forward(") :]


def test_the_conv_bias_is_added_by_the_epilogue_kernel(tmp_path) -> None:
    reason, forward = forward_of(tmp_path, CONV_EPILOGUE)
    assert (
        "F.conv2d(_ext.kp_channels_last(x), conv_weight, None, (1, 1), (0, 0), (1, 1), 1)"
        in forward
    )
    assert "view = conv_bias.view(-1, 1, 1)" in forward
    assert "[add, mul, add, leaky_relu, gelu]" in reason
    # the module stays guarded as a plain Conv2d with the options the call was written with
    assert "type(self.conv) is nn.Conv2d" in forward and "self.conv.padding == (0, 0)" in forward
    # float32 on cuda: the bias is still the kernel's, the conv's input as it was
    _, forward = forward_of(tmp_path, CONV_EPILOGUE, dtype="float32")
    assert "F.conv2d(x, conv_weight, None, (1, 1), (0, 0), (1, 1), 1)" in forward


def test_a_transposed_conv_keeps_its_options_and_one_kernel_reads_the_device(tmp_path) -> None:
    reason, forward = forward_of(tmp_path, TRANSPOSED, dtype="float32")  # a float32 0-d tensor
    # F.conv_transpose2d's order: stride, padding, output_padding, groups, dilation
    assert "None, (2, 2), (1, 1), (1, 1), 1, (2, 2))" in forward
    assert "fused 1 pointwise chain into 1 kernel: [add, add, minimum, gelu, mul]" in reason
    # the device is read from the conv's output, which exists before the kernel runs
    assert "getattr_1 = conv_transpose2d.device" in forward


def test_a_conv_read_outside_the_kernels_keeps_its_bias_and_cpu_keeps_every_bias(
    tmp_path,
) -> None:
    _, forward = forward_of(tmp_path, CONV_RETURNED)
    assert "self.conv(" in forward and "F.conv2d" not in forward
    _, forward = forward_of(tmp_path, CONV_EPILOGUE, device="cpu")
    assert "conv = self.conv(x)" in forward and "F.conv2d" not in forward


@pytest.mark.slow
def test_a_channels_last_candidate_matches_its_reference_on_every_layout(
    tmp_path, monkeypatch
) -> None:
    """Built for the cpu with the cuda policy: the input conversion, the conv without its bias,
    the kernel's reordered inputs and its outputs permuted back give the reference's values,
    for inputs the trace did not see too (other sizes, a channels-last input, a strided one);
    a transposed conv's options are passed in their places."""
    monkeypatch.setattr(layouts, "CHANNELS_LAST_DEVICES", {"cpu"})
    monkeypatch.setattr(layouts, "CHANNELS_LAST_DTYPES", {torch.float32})
    path = write_module(tmp_path, "model", HEADER + CONV_EPILOGUE)
    problem = problem_from_target(f"{path}:Model", "cpu", None)
    proposal = propose_here(problem)
    assert proposal.candidate is not None, proposal.reason
    source = proposal.candidate.source
    # the conv without its bias, on a channels-last input; the bias added in the kernel
    assert "F.conv2d(_ext.kp_channels_last(x), conv_weight, None," in source
    assert "_ext.fused_0(conv2d, view, scale, bias)" in source
    assert "kp::in_order({in0, in1, in2, in3}, {0, 2, 3, 1})" in source
    assert "plan_fast(ins, {true, true, true, true}, sizes, {3})" in source  # rows of C values
    transposed_path = write_module(tmp_path, "transposed", HEADER + TRANSPOSED)
    transposed_problem = problem_from_target(f"{transposed_path}:Model", "cpu", None)
    transposed = propose_here(transposed_problem).candidate
    candidate_path = write_module(tmp_path, "candidate", source)
    transposed_candidate = write_module(tmp_path, "transposed_candidate", transposed.source)
    build_in_parallel([candidate_path, transposed_candidate])
    candidate = import_candidate(candidate_path)
    reference, fused = construct(problem, candidate, seed=3)
    (x,) = make_inputs(problem, seed=3)
    cases = {
        "traced": x,
        "other sizes": torch.randn(5, 3, 9, 20),
        "channels last": x.contiguous(memory_format=torch.channels_last),
        "strided": torch.randn(2, 3, 24, 12)[:, :, ::2],
    }
    with torch.no_grad():
        for name, inputs in cases.items():
            ours = fused(inputs)
            assert ours.is_contiguous(memory_format=torch.channels_last), name
            torch.testing.assert_close(ours, reference(inputs), rtol=1e-5, atol=1e-5, msg=name)
    reference, fused = construct(transposed_problem, import_candidate(transposed_candidate), 4)
    with torch.no_grad():
        for x in (make_inputs(transposed_problem, seed=4)[0], torch.randn(3, 4, 5, 11)):
            torch.testing.assert_close(fused(x), reference(x), rtol=1e-5, atol=1e-5)
