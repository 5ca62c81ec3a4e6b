"""The offline proposer on cuda adds a plain convolution's bias in its epilogue kernel
(agents.offline.conv_bias), and reads a pointwise result's device from an operand: which
convolutions are split, the guards that keep the split honest (a bias, no hooks), and built
candidates matching their reference (on cpu, with the split opened to it)."""

from __future__ import annotations

import pytest
import torch

from agents.offline import conv_bias, propose_here
from harness.problem.cases import make_inputs
from harness.problem.load import problem_from_target
from harness.static.native import check_native
from harness.static.python import check_python
from tests.conftest import embedded_source, write_module
from tests.test_offline_proposer import build_in_parallel, construct, import_candidate

HEADER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


"""
# A conv and its per-channel epilogue (KernelBench level 2's shape).
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
# A hook on the conv: the functional call would not run it.
HOOKED = """
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.conv.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))

    def forward(self, x):
        return torch.relu(self.conv(x)) + 1.0


def get_inputs():
    return [torch.randn(2, 3, 10, 10)]
"""


def forward_of(tmp_path, source: str, device: str = "cuda") -> tuple[str, str, str]:
    path = write_module(tmp_path, "model", HEADER + source)
    proposal = propose_here(problem_from_target(f"{path}:Model", device, None))
    assert proposal.candidate is not None, proposal.reason
    text = proposal.candidate.source
    return proposal.reason, text[text.index("    def forward(") :], text


def test_the_conv_bias_is_added_by_the_epilogue_kernel(tmp_path) -> None:
    reason, forward, source = forward_of(tmp_path, CONV_EPILOGUE)
    # (its input made channels-last: agents.offline.conv_layout, tests/test_offline_conv_layout.py)
    assert "F.conv2d(_ext.kp_channels_last(x), conv_weight, None, (1, 1), (0, 0), (1, 1), 1)" in (
        forward
    )
    assert "view = conv_bias.view(-1, 1, 1)" in forward
    assert "[add, mul, add, leaky_relu, gelu]" in reason
    # guarded: a plain Conv2d with the options the call was written with, a bias, no hooks
    for guard in (
        "type(self.conv) is nn.Conv2d",
        "self.conv.padding == (0, 0)",
        "self.conv.bias is not None",
        "not self.conv._forward_hooks",
        "not self.conv._forward_pre_hooks",
    ):
        assert guard in forward, guard
    cuda = embedded_source(source, "_CUDA_SOURCE")
    declarations = embedded_source(source, "_CPP_SOURCE")
    assert check_native(declarations + cuda, "float32") == []
    assert check_python(source, "Model", "float32") == []


def test_a_transposed_conv_keeps_its_options_and_one_kernel_reads_the_device(tmp_path) -> None:
    reason, forward, _ = forward_of(tmp_path, TRANSPOSED)
    # F.conv_transpose2d's order: stride, padding, output_padding, groups, dilation
    assert (
        "F.conv_transpose2d(_ext.kp_channels_last(x), up_weight, None, (2, 2), (1, 1), (1, 1), 1, "
        "(2, 2))" in forward
    )
    assert "fused 1 pointwise chain into 1 kernel: [add, add, minimum, gelu, mul]" in reason
    # the device is read from the conv's output, which exists before the kernel runs
    assert "getattr_1 = conv_transpose2d.device" in forward


@pytest.mark.parametrize("source", [CONV_RETURNED, HOOKED])
def test_a_conv_read_outside_the_kernels_or_hooked_keeps_its_bias(tmp_path, source: str) -> None:
    _, forward, _ = forward_of(tmp_path, source)
    assert "self.conv(" in forward and "F.conv2d" not in forward


def test_cpu_convs_keep_their_bias(tmp_path) -> None:
    _, forward, _ = forward_of(tmp_path, CONV_EPILOGUE, device="cpu")
    assert "conv = self.conv(x)" in forward and "F.conv2d" not in forward


@pytest.mark.slow
def test_split_candidates_match_their_reference_and_fall_back_where_the_guards_fail(
    tmp_path, monkeypatch
) -> None:
    """Built for the cpu with the split opened to it: the conv without its bias plus the
    kernel's add give the reference's values, for inputs the trace did not see too; a
    transposed conv's options are passed in their places; a hook added after construction,
    or a bias removed, sends the call to the original forward."""
    monkeypatch.setattr(conv_bias, "SPLIT_DEVICES", {"cpu"})
    problems, paths = {}, {}
    for name, text in (("epilogue", CONV_EPILOGUE), ("transposed", TRANSPOSED)):
        module = write_module(tmp_path, name, HEADER + text)
        problems[name] = problem_from_target(f"{module}:Model", "cpu", None)
        proposal = propose_here(problems[name])
        assert proposal.candidate is not None and "None" in proposal.candidate.source
        paths[name] = write_module(tmp_path, f"{name}_candidate", proposal.candidate.source)
    build_in_parallel(list(paths.values()))
    reference, fused = construct(problems["epilogue"], import_candidate(paths["epilogue"]), 3)
    (x,) = make_inputs(problems["epilogue"], seed=3)
    cases = {
        "traced": x,
        "other sizes": torch.randn(5, 3, 9, 20),
        "strided": torch.randn(2, 3, 24, 12)[:, :, ::2],
    }
    with torch.no_grad():
        for name, inputs in cases.items():
            torch.testing.assert_close(fused(inputs), reference(inputs), rtol=1e-5, atol=1e-5,
                                       msg=name)  # fmt: skip
        for model in (reference, fused):
            model.conv.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))
        torch.testing.assert_close(fused(x), reference(x), rtol=1e-5, atol=1e-5)
        for model in (reference, fused):
            model.conv = torch.nn.Conv2d(3, 16, 3, bias=False)
        fused.conv.load_state_dict(reference.conv.state_dict())
        torch.testing.assert_close(fused(x), reference(x), rtol=1e-5, atol=1e-5)
    reference, fused = construct(problems["transposed"], import_candidate(paths["transposed"]), 4)
    with torch.no_grad():
        for x in (make_inputs(problems["transposed"], seed=4)[0], torch.randn(3, 4, 5, 11)):
            torch.testing.assert_close(fused(x), reference(x), rtol=1e-5, atol=1e-5)
