"""The offline proposer's decisions and the code it writes, without building it: what is fused,
what is left to PyTorch, what is reported when nothing can be fused, and the generated sources
passing the static gates. The builds and their outputs are tests/test_offline_proposer.py.
"""

from __future__ import annotations

import builtins
import keyword
import math
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

from agents.offline import constants, propose_here, traffic
from agents.offline.emit import RESERVED
from harness.problem.load import problem_from_target
from harness.records import Problem
from harness.static.native import check_native
from harness.static.python import check_python
from tests.conftest import EXAMPLES, ROOT, embedded_source, write_module


def kernelbench(tmp_path: Path, name: str, body: str, inputs: str, init: str = "[]") -> Problem:
    source = f"""
import torch
import torch.nn as nn
import torch.nn.functional as F
{textwrap.dedent(body)}

def get_inputs():
    return {inputs}

def get_init_inputs():
    return {init}
"""
    return problem_from_target(str(write_module(tmp_path, name, source)), "cpu", None)


def test_module_without_pointwise_ops_gets_no_candidate(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "plain_linear",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(32, 16)

            def forward(self, x):
                return self.linear(x)
        """,
        "[torch.randn(8, 32)]",
    )
    proposal = propose_here(problem)
    assert proposal.candidate is None
    assert proposal.fused_chains == 0
    assert proposal.reason.startswith("nothing to fuse")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_pointwise_op_alone_stays_pytorchs_one_pass(tmp_path: Path, device: str) -> None:
    # KernelBench's 26_GELU_, and an L1 norm on rows narrower than a row kernel takes (on cpu,
    # or under agents.offline.rows.SUM_MIN_WIDTH on cuda): each pointwise op is alone between
    # library calls, one pass of eager's own; a kernel for it reads and writes the same.
    for name, forward, kinds in [
        ("gelu_alone", "F.gelu(x)", ["gelu"]),
        ("l1_norm", "x / torch.sum(torch.abs(x), dim=1, keepdim=True)", ["abs", "div"]),
    ]:
        lone = kernelbench(
            tmp_path,
            name,
            f"""
            class Model(nn.Module):
                def forward(self, x):
                    return {forward}
            """,
            "[torch.randn(8, 32)]",
        ).model_copy(update={"device": device})
        proposal = propose_here(lone)
        assert proposal.candidate is None, proposal.reason
        assert proposal.reason.startswith("nothing to gain"), proposal.reason
        assert all(kind in proposal.reason for kind in kinds), proposal.reason

    # Beside a chain, a lone op is left as the module's own call and the chain is fused.
    mixed = kernelbench(
        tmp_path,
        "lone_and_chain",
        """
        class Model(nn.Module):
            def forward(self, x):
                s = torch.sum(torch.abs(x), dim=1, keepdim=True)
                return torch.sigmoid(x / s) * 2.0
        """,
        "[torch.randn(8, 32)]",
    ).model_copy(update={"device": device})
    proposal = propose_here(mixed)
    assert proposal.fused_chains == 1, proposal.reason
    assert "[div, sigmoid, mul]" in proposal.reason and "abs" in proposal.reason
    assert "torch.abs(x)" in proposal.candidate.source
    assert check_python(proposal.candidate.source, "Model", "float32") == []


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_chain_too_small_beside_the_module_to_show_in_its_timing_is_not_offered(
    tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KernelBench's 25_Conv2d_Min_Tanh_Tanh: two ops fused on what a reduction leaves of a
    # large library call's output. The kernel saves a pass over 64 values of the module's
    # ~270 KB of traffic; its candidate measured 0.94x eager on an H200.
    problem = kernelbench(
        tmp_path,
        "reduced_then_chain",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(256, 256)

            def forward(self, x):
                m = torch.amax(self.linear(x), dim=1, keepdim=True)
                return torch.tanh(torch.tanh(m))
        """,
        "[torch.randn(64, 256)]",
    ).model_copy(update={"device": device})
    proposal = propose_here(problem)
    assert proposal.candidate is None, proposal.reason
    assert proposal.reason.startswith("nothing to gain: the kernels would save"), proposal.reason

    monkeypatch.setattr(traffic, "MIN_SAVED_SHARE", 0.0)  # the rule off: the same chain is fused
    assert propose_here(problem).fused_chains == 1


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_an_epilogue_beside_a_compute_bound_gemm_is_not_offered(
    tmp_path: Path, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # KernelBench's 9_Matmul_Subtract_Multiply_ReLU and 12_Gemm_Multiply_LeakyReLU, smaller: the
    # epilogue's passes are a third of the memory eager moves, but the GEMM computes for far
    # longer than that takes (both measured 1.00x eager with the fused epilogue on an H200).
    problem = kernelbench(
        tmp_path,
        "gemm_epilogue",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(2048, 512)

            def forward(self, x):
                return torch.relu((self.linear(x) - 0.5) * 2.0)
        """,
        "[torch.randn(2048, 2048)]",
    ).model_copy(update={"device": device})
    proposal = propose_here(problem)
    assert proposal.candidate is None, proposal.reason
    assert proposal.reason.startswith("nothing to gain: the kernels would save"), proposal.reason

    # Its memory traffic alone (compute left out): the same epilogue is fused.
    monkeypatch.setattr(traffic, "BALANCE", dict.fromkeys(traffic.BALANCE, float("inf")))
    assert propose_here(problem).fused_chains == 1


def test_constants_forward_makes_are_written_as_they_were_made(tmp_path: Path) -> None:
    # torch.fx keeps a tensor made of Python numbers in forward as a constant of the trace
    # (agents/offline/constants.py); the built candidates: tests/test_offline_proposer.py.
    def proposed(name: str, body: str, inputs: str):
        return propose_here(kernelbench(tmp_path, name, body, inputs))

    # written into in place: every read of it is a value of its own in the trace, so a write
    # would be lost; refused rather than frozen at its traced value
    written = proposed(
        "written_constant",
        """
        class Model(nn.Module):
            def forward(self, x):
                c = torch.tensor(0.0)
                c.fill_(x.mean())
                return torch.tanh(x * c) + 1.0
        """,
        "[torch.randn(8, 32)]",
    )
    assert written.candidate is None and "writes in place" in written.reason, written.reason

    # a mask's -inf, read by a PyTorch call: made again as a literal Python can read
    masked = proposed(
        "masked_constant",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(32, 32)

            def forward(self, x, mask):
                s = torch.tanh(self.linear(x)) * 2.0
                return s.masked_fill(mask, torch.tensor(float("-inf")))
        """,
        "[torch.randn(8, 32), torch.rand(8, 32) > 0.5]",
    )
    assert masked.candidate is not None, masked.reason
    assert "torch.tensor(-math.inf, dtype=torch.float32)" in masked.candidate.source
    assert check_python(masked.candidate.source, "Model", "float32") == []
    literals = [constants.constant_source(torch.tensor(v)) for v in (float("nan"), float("inf"))]
    assert [eval(text, {"torch": torch, "math": math}).item() for text in literals][1] == math.inf

    # numbers alone once the constant is a number: Python's arithmetic, not a kernel's
    numbers = proposed(
        "numbers_constant",
        """
        class Model(nn.Module):
            def forward(self, x):
                s = torch.tanh(torch.exp(x.size(1) * torch.tensor(0.01)))
                return torch.cat([x, s.expand(2, 1)], dim=1) * 2.0 + 1.0
        """,
        "[torch.randn(2, 2)]",
    )
    assert numbers.candidate is not None, numbers.reason
    assert "_ext.fused_0(size)" not in numbers.candidate.source
    assert "size * _tensor_constant0" in numbers.candidate.source


def test_untraceable_module_says_why(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "branchy",
        """
        class Model(nn.Module):
            def forward(self, x):
                if x.sum() > 0:
                    return torch.relu(x)
                return x * 2
        """,
        "[torch.randn(8, 32)]",
    )
    proposal = propose_here(problem)
    assert proposal.candidate is None
    assert proposal.reason.startswith("cannot trace")


def test_chains_separated_by_a_matmul_are_two_kernels(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "two_chains",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = nn.ModuleList([nn.Linear(32, 32), nn.LayerNorm(32)])
                self.bias = nn.Parameter(torch.randn(32))

            def forward(self, x, w):
                h = F.relu(self.blocks[0](x) + self.bias) * 2.0
                m = torch.matmul(self.blocks[1](h), w)
                return torch.sigmoid(m) - 0.5
        """,
        "[torch.randn(8, 32), torch.randn(32, 32)]",
    )
    proposal = propose_here(problem)
    assert proposal.fused_chains == 2, proposal.reason
    source = proposal.candidate.source
    assert source.count("_ext.fused_") == 2
    assert "self.blocks[0](x)" in source and "self.blocks[1](" in source
    assert "torch.matmul(" in source


def test_gelu_exact_and_tanh_forms(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "gelus",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.act = nn.GELU(approximate="tanh")

            def forward(self, x):
                return F.gelu(x) + self.act(x)
        """,
        "[torch.randn(8, 32)]",
    )
    proposal = propose_here(problem)
    assert proposal.fused_chains == 1
    source = proposal.candidate.source
    assert "kp::erf(a0 * 0.70710678118654752440f)" in source
    assert "kp::tanh(0.79788456080286535588f * (a0 + 0.044715f * (a0 * a0 * a0)))" in source


def test_candidate_passes_the_static_gate_and_is_deterministic(tmp_path: Path) -> None:
    for target in EXAMPLES.values():
        problem = problem_from_target(str(ROOT / target), "cpu", None)
        first, second = propose_here(problem), propose_here(problem)
        assert first.candidate is not None
        assert first.candidate.source == second.candidate.source
        source = first.candidate.source
        assert check_python(source, problem.class_name, problem.dtype) == []
        cpp = embedded_source(source, "_CPP_SOURCE")
        assert check_native(cpp, problem.dtype) == []


def test_cuda_candidate_source(tmp_path: Path) -> None:
    problem = problem_from_target(str(ROOT / EXAMPLES["fused_gelu_block"]), "cuda", None)
    proposal = propose_here(problem)
    source = proposal.candidate.source
    assert "cuda_sources=[_CUDA_SOURCE]" in source and "extra_cuda_cflags=['-O3']" in source
    assert "no_implicit_headers=True" in source
    cuda = embedded_source(source, "_CUDA_SOURCE")
    for expected in (
        "__global__ void fused_0_fast",
        "__global__ void fused_0_general",
        "<<<l.blocks, l.threads, l.shared, l.stream>>>",
        "__global__ void fused_0_rowwise",
        "int fused_0_launch(const kp::Launch& l)",
        "kp::load_vec<VEC>",
        "tanhf(x)",
    ):
        assert expected in cuda, expected
    host = embedded_source(source, "_CPP_SOURCE")
    for expected in (
        "#include <torch/extension.h>",
        "at::Tensor fused_0(",
        "at::cuda::getCurrentCUDAStream()",
        "C10_CUDA_CHECK(static_cast<cudaError_t>(fused_0_launch(l)));",
    ):
        assert expected in host, expected
    assert "__global__" not in host and "<<<" not in host
    assert check_native(host, "float32") == [] and check_native(cuda, "float32") == []
    assert check_python(source, problem.class_name, "float32") == []


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (no GPU)")
def test_cuda_kernel_file_reads_no_torch_headers(tmp_path: Path) -> None:
    """nvcc's pass over torch's headers was a CUDA candidate's whole build (26-40 s): the .cu
    file the proposer writes includes c10's 16-bit types only, whatever its kernels are."""
    problem = problem_from_target(str(ROOT / EXAMPLES["fused_gelu_block"]), "cuda", None)
    cuda = embedded_source(propose_here(problem).candidate.source, "_CUDA_SOURCE")
    (tmp_path / "k.cu").write_text(cuda)
    include = Path(torch.__file__).parent / "include"
    done = subprocess.run(
        ["nvcc", "-std=c++17", "-I", str(include), "-M", "k.cu"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    read = {
        Path(word).relative_to(include).parts[0:2]
        for line in done.stdout.splitlines()
        for word in line.split()
        if word.startswith(str(include))
    }
    # c10's types and the header-only part of torch they are made of; no ATen, no torch API
    assert read and read <= {("c10", "util"), ("c10", "macros"), ("torch", "headeronly")}, read


def test_constructor_needing_another_package_is_reported(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "statistics_init",
        """
        import statistics as st

        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("w", torch.full((8,), st.fmean([1.0, 3.0])))

            def forward(self, x):
                return torch.relu(x * self.w)
        """,
        "[torch.randn(4, 8)]",
    )
    proposal = propose_here(problem)
    assert proposal.candidate is None
    assert "'st'" in proposal.reason and "statistics" in proposal.reason


def test_in_place_writes(tmp_path: Path) -> None:
    """A private in-place op is fused; values sharing memory with a view written in place are
    left to PyTorch, in order."""
    problem = kernelbench(
        tmp_path,
        "in_place",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(8, 8)

            def forward(self, x):
                h = self.linear(x)
                v = h.view(-1)
                a = v * 2
                h.relu_()
                b = v * 3
                g = self.linear(x)
                g.relu_()
                return (a + b) * 0.5, torch.sigmoid(g)
        """,
        "[torch.randn(4, 8)]",
    )
    proposal = propose_here(problem)
    assert "[relu, sigmoid]; [add, mul]; left to PyTorch" in proposal.reason  # a + b: fresh again
    assert proposal.reason.endswith("mul, relu_, mul_1")
    forward = proposal.candidate.source.split("def forward", 1)[1]
    assert forward.index("view * 2") < forward.index("linear.relu_()") < forward.index("view * 3")


def test_every_name_the_static_check_refuses_as_a_variable_is_renamed() -> None:
    """The offline proposer names forward's values after the graph's nodes; a builtin that the
    static check refuses even as a variable (its table can grow) must be one it renames."""
    names = {name for name in dir(builtins) if name.isidentifier() and not name.startswith("__")}
    refused = {
        name
        for name in sorted(names - set(keyword.kwlist))
        if check_python(
            "import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
            f"    def forward(self, x):\n        {name} = x\n        return {name}\n",
            "Model",
            "float32",
        )
    }
    assert refused, "the static check refuses no builtin name: this test checks nothing"
    assert refused <= RESERVED, f"named by the graph but refused: {sorted(refused - RESERVED)}"


def test_a_candidate_the_static_check_would_refuse_is_not_proposed(tmp_path: Path) -> None:
    problem = kernelbench(
        tmp_path,
        "attribute_named_like_a_module",
        """
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.random = nn.Linear(32, 16)

            def forward(self, x):
                return torch.relu(self.random(x)) * 2
        """,
        "[torch.randn(8, 32)]",
    )
    proposal = propose_here(problem)
    assert proposal.candidate is None
    assert proposal.reason.startswith("the candidate written fails the static checks: line ")
    assert ".random: reaches the random module" in proposal.reason
