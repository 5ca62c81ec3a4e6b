"""Channels-last convolutions on cuda (agents.offline.conv_layout): which convolutions run
channels-last with an epilogue that reads NHWC and writes NCHW, which keep the NCHW path, the
sources written (passing the static gates, the kernels compiling with nvcc), and the 5% rule
counting cuDNN's layout conversions. The kernels run on the CPU under an emulation of CUDA's
grid in tests/test_offline_conv_layout_emulated.py, and on a GPU in
tests/test_offline_conv_layout_gpu.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from agents.offline import conv_layout, propose_here, traffic
from agents.offline.grouping import fusion_groups, worth_a_kernel
from agents.offline.trace import trace
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import problem_from_target
from harness.static.native import check_native
from harness.static.python import check_python
from tests.conftest import embedded_source, write_module

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


"""


def conv_module(init: str, forward: str, inputs: str = "torch.randn(2, 3, 12, 12)") -> str:
    return f"""
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}


def get_inputs():
    return [{inputs}]
"""


# KernelBench level 2's 2-d conv epilogues, small: the chain's shape, each with the name of
# the problem it copies, and the kernel's call (the convolution's output is the input read NHWC).
TAKEN = {
    "1_relu_bias": conv_module(
        "self.conv = nn.Conv2d(3, 16, 3)\n        self.bias = nn.Parameter(torch.randn(16, 1, 1))",
        "return torch.relu(self.conv(x)) + self.bias",
    ),
    "54_multiply_leaky_relu_gelu": conv_module(
        "self.conv = nn.Conv2d(3, 16, 3)\n"
        "        self.multiplier = nn.Parameter(torch.randn(16, 1, 1))",
        "return F.gelu(F.leaky_relu(self.conv(x) * self.multiplier, 0.01))",
    ),
    "4_mish_mish": conv_module(
        "self.conv = nn.Conv2d(3, 16, 3)", "return F.mish(F.mish(self.conv(x)))"
    ),
    "93_add_min_gelu_multiply": conv_module(
        "self.up = nn.ConvTranspose2d(4, 6, 3, stride=2)",
        "x = self.up(x) + 0.5\n"
        "        x = torch.min(x, torch.tensor(0.0, device=x.device))\n"
        "        return F.gelu(x) * 2.0",
        "torch.randn(2, 4, 7, 9)",
    ),
    "2_bias_clamp_scale_clamp_divide": conv_module(
        "self.up = nn.ConvTranspose2d(4, 8, 3, stride=2, padding=1, output_padding=1)\n"
        "        self.bias = nn.Parameter(torch.randn(1, 8, 1, 1))",
        "x = torch.clamp(self.up(x) + self.bias, min=0.0, max=1.0) * 2.0\n"
        "        return torch.clamp(x, min=0.0, max=1.0) / 2.0",
        "torch.randn(2, 4, 7, 9)",
    ),
    # forward's own F.conv2d (no module, no bias split), read as the kernel's second input
    "functional": conv_module(
        "self.weight = nn.Parameter(torch.randn(8, 3, 3, 3))\n"
        "        self.scale = nn.Parameter(torch.randn(8, 1, 1))",
        "return torch.relu(self.scale * F.conv2d(x, self.weight, padding=1)) - 1.0",
    ),
}
CONV_INPUT = {"functional": 1}  # the kernel input that is the conv's output, where not the first

KEPT_NCHW = {
    # a full-size operand beside the conv's output: read NCHW
    "residual": conv_module(
        "self.conv = nn.Conv2d(3, 8, 3, padding=1)\n"
        "        self.residual = nn.Parameter(torch.randn(8, 12, 12))",
        "return torch.relu(self.conv(x) + self.residual)",
    ),
    "input_beside": conv_module(
        "self.conv = nn.Conv2d(3, 3, 3, padding=1)", "return torch.relu(self.conv(x) + x) * 2.0"
    ),
    # a [W] operand broadcasts along the width, not the channels
    "width_operand": conv_module(
        "self.conv = nn.Conv2d(3, 10, 3)\n        self.w = nn.Parameter(torch.randn(10))",
        "return torch.relu(self.conv(x) * self.w)",
    ),
    # two outputs of the chain
    "two_outputs": conv_module(
        "self.conv = nn.Conv2d(3, 8, 3)",
        "y = torch.relu(self.conv(x))\n        return y, torch.sigmoid(y) * 3.0",
    ),
    # the conv's output read outside the chain too (its module and bias stay)
    "conv_returned": conv_module(
        "self.conv = nn.Conv2d(3, 8, 3)", "y = self.conv(x)\n        return y, torch.relu(y) * 2.0"
    ),
    # a row reduction in the chain
    "row_sum": conv_module(
        "self.conv = nn.Conv2d(3, 4, 3)",
        "y = torch.relu(self.conv(x)) * 2.0\n        return y / y.abs().sum(dim=-1, keepdim=True)",
        "torch.randn(1, 3, 3, 1026)",
    ),
    "conv3d": conv_module(
        "self.conv = nn.Conv3d(3, 8, 3)\n        self.shift = nn.Parameter(torch.randn(8, 1, 1, 1))",
        "return F.gelu(F.leaky_relu(self.conv(x), 0.2) + self.shift)",
        "torch.randn(2, 3, 6, 8, 8)",
    ),
    "grouped": conv_module(
        "self.conv = nn.Conv2d(4, 8, 3, groups=2)",
        "return torch.relu(self.conv(x)) + 1.0",
        "torch.randn(2, 4, 10, 10)",
    ),
    # more images than one grid of tiles holds (65535): the epilogue's NHWC input would take
    # the general kernel at run time
    "many_images": conv_module(
        "self.conv = nn.Conv2d(1, 4, 1)",
        "return torch.relu(self.conv(x)) * 2.0",
        "torch.randn(65536, 1, 2, 2)",
    ),
    # no bias: the module call stays, in NCHW
    "no_bias": conv_module(
        "self.conv = nn.Conv2d(3, 8, 3, bias=False)", "return torch.relu(self.conv(x)) * 2.0"
    ),
}


def proposed(tmp_path: Path, name: str, source: str, device: str = "cuda"):
    path = write_module(tmp_path, name, HEADER + source)
    proposal = propose_here(problem_from_target(f"{path}:Model", device, None))
    assert proposal.candidate is not None, proposal.reason
    return proposal


def forward_of(source: str) -> str:
    return source[source.index("    def forward(") :]


@pytest.mark.parametrize("name", list(TAKEN))
def test_2d_conv_epilogues_run_channels_last_and_write_nchw(tmp_path: Path, name: str) -> None:
    proposal = proposed(tmp_path, name, TAKEN[name])
    source = proposal.candidate.source
    assert "a convolution runs channels-last, its epilogue writing NCHW" in proposal.reason
    forward = forward_of(source)
    assert "(_ext.kp_channels_last(x), " in forward, forward
    assert "'kp_channels_last'" in source  # bound from the extension
    cuda = embedded_source(source, "_CUDA_SOURCE")
    host = embedded_source(source, "_CPP_SOURCE")
    # the tiled epilogue, launched for every tile shape, and the input's transpose
    assert "    fused_0_nhwc(" in cuda and "__shared__ float tile[TC][TP + 32 / TC];" in cuda
    for variant, channels in enumerate((32, 16, 8, 4)):
        assert f"case {6 + variant}: fused_0_nhwc<scalar_t, {channels}><<<" in cuda
    assert "kp::channels_last_tiles<T, TC><<<" in cuda
    # taken first where the conv's output is channels-last, else the usual paths
    source_input = CONV_INPUT.get(name, 0)
    assert f"kp::nhwc_plan(ins, {source_input}, sizes, 6, l);" in host
    assert "at::Tensor kp_channels_last(const at::Tensor& x)" in host
    assert host.index("if (nhwc.ok) {") < host.index("if (plan.fast) {")
    assert check_native(host + cuda, "float32") == []
    assert check_python(source, "Model", "float32") == []


@pytest.mark.parametrize("name", list(KEPT_NCHW))
def test_other_convs_and_chains_keep_the_nchw_path(tmp_path: Path, name: str) -> None:
    proposal = proposed(tmp_path, name, KEPT_NCHW[name])
    source = proposal.candidate.source
    assert "kp_channels_last" not in source and "channels-last" not in proposal.reason
    assert "_nhwc" not in embedded_source(source, "_CUDA_SOURCE")


def test_cpu_candidates_keep_the_nchw_path(tmp_path: Path) -> None:
    name = "54_multiply_leaky_relu_gelu"
    source = proposed(tmp_path, name, TAKEN[name], device="cpu").candidate.source
    assert "kp_channels_last" not in source and "conv = self.conv(x)" in forward_of(source)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU)")
@pytest.mark.parametrize("name", ["54_multiply_leaky_relu_gelu", "functional"])
def test_the_tiled_kernels_compile_with_nvcc(tmp_path: Path, name: str) -> None:
    """The whole .cu file for sm_90 (H100/H200), every tile shape and dtype instantiated."""
    source = proposed(tmp_path, name, TAKEN[name]).candidate.source
    cuda = embedded_source(source, "_CUDA_SOURCE")
    assert "fused_0_nhwc" in cuda
    (tmp_path / "k.cu").write_text(cuda)
    include = Path(torch.__file__).parent / "include"
    done = subprocess.run(
        ["nvcc", "-std=c++17", "-O3", "-arch=sm_90", "-I", str(include), "-c", "k.cu"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]


def traced_groups(tmp_path: Path, source: str):
    path = write_module(tmp_path, "model", HEADER + source)
    problem = problem_from_target(f"{path}:Model", "cpu", None)
    reference = build_reference(problem, seed=0)
    traced = trace(reference, make_inputs(problem, seed=0), torch.float32, split_bias=True)
    nodes = list(traced.graph_module.graph.nodes)
    groups = [
        group for group in fusion_groups(nodes, traced.ops) if worth_a_kernel(group, traced.ops)
    ]
    return traced, groups


def test_the_5_percent_rule_counts_cudnns_layout_conversions(tmp_path: Path) -> None:
    """Eager pays a pass over a 2-d conv's input and one over its output (cuDNN's conversions,
    bench/BENCHMARKS.md section 22); channels-last, the candidate pays its own pass over the
    input and saves the output's."""
    traced, groups = traced_groups(tmp_path, TAKEN["54_multiply_leaky_relu_gelu"])
    plan = conv_layout.plan_channels_last(groups, traced.ops, "cuda", torch.float32)
    (conv,) = plan.convs
    graph_module = traced.graph_module
    modules = dict(graph_module.named_modules())
    image, output = 4 * 2 * 3 * 12 * 12, 4 * 2 * 16 * 10 * 10  # bytes, float32
    assert conv_layout.eager_conversion_bytes(conv, modules, "cuda") == 2 * (image + output)
    assert conv_layout.eager_conversion_bytes(conv, modules, "cpu") == 0
    assert conv_layout.transpose_bytes(conv) == 2 * image
    total = sum(
        traffic.eager_cost(node, modules, "cuda")
        + conv_layout.eager_conversion_bytes(node, modules, "cuda")
        for node in graph_module.graph.nodes
    )
    nchw = traffic.saved_share(graph_module, groups, traced.ops, "cuda")
    channels_last = traffic.saved_share(graph_module, groups, traced.ops, "cuda", plan.convs)
    assert channels_last - nchw == pytest.approx(2 * output / total)


def test_the_layout_credit_is_only_where_it_was_measured(tmp_path: Path) -> None:
    """cuDNN's conversions were measured for float32 under TF32 (PyTorch's default) on NCHW
    inputs: strict float32, 16-bit convs and an input already channels-last get no credit."""
    traced, groups = traced_groups(tmp_path, TAKEN["54_multiply_leaky_relu_gelu"])
    (conv,) = conv_layout.plan_channels_last(groups, traced.ops, "cuda", torch.float32).convs
    modules = dict(traced.graph_module.named_modules())
    assert conv_layout.eager_conversion_bytes(conv, modules, "cuda") > 0
    before = torch.backends.cudnn.conv.fp32_precision
    torch.backends.cudnn.conv.fp32_precision = "ieee"
    try:
        assert conv_layout.eager_conversion_bytes(conv, modules, "cuda") == 0
    finally:
        torch.backends.cudnn.conv.fp32_precision = before
    source = conv.args[0]
    meta = source.meta["tensor_meta"]
    source.meta["tensor_meta"] = meta._replace(memory_format=torch.channels_last)
    assert conv_layout.eager_conversion_bytes(conv, modules, "cuda") == 0
    source.meta["tensor_meta"] = meta
    conv.meta["tensor_meta"] = conv.meta["tensor_meta"]._replace(dtype=torch.float16)
    assert conv_layout.eager_conversion_bytes(conv, modules, "cuda") == 0


@pytest.mark.parametrize("name", ["conv3d", "grouped"])
def test_3d_and_grouped_convs_count_no_conversion(tmp_path: Path, name: str) -> None:
    traced, _ = traced_groups(tmp_path, KEPT_NCHW[name])
    modules = dict(traced.graph_module.named_modules())
    convs = [node for node in traced.graph_module.graph.nodes if "conv" in node.name]
    assert convs and all(
        conv_layout.eager_conversion_bytes(node, modules, "cuda") == 0 for node in convs
    )


def test_a_conv_reduced_over_its_channels_gains_no_layout_and_is_not_offered(
    tmp_path: Path,
) -> None:
    # KernelBench's 25_Conv2d_Min_Tanh_Tanh, smaller: the min over channels reads the conv, so
    # it stays NCHW, and its conversions only add to eager's cost; the tanh chain on the one
    # channel left saves under 5% (measured 0.94x eager on an H200).
    source = conv_module(
        "self.conv = nn.Conv2d(16, 64, 3)",
        "x = torch.min(self.conv(x), dim=1, keepdim=True)[0]\n"
        "        return torch.tanh(torch.tanh(x))",
        "torch.rand(8, 16, 64, 64)",
    )
    path = write_module(tmp_path, "min_tanh_tanh", HEADER + source)
    proposal = propose_here(problem_from_target(f"{path}:Model", "cuda", None))
    assert proposal.candidate is None
    assert proposal.reason.startswith("nothing to gain: the kernels would save"), proposal.reason
