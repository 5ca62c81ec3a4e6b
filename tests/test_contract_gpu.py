"""The contract's cuda answers, through the whole harness on a GPU (-m gpu).

Candidates for the red-team bias + GELU problem, each built and judged as any candidate is:
a launch on the current stream held in a local ``cudaStream_t`` with more than 48 KB of dynamic
shared memory (``cudaFuncSetAttribute``) is accepted; on a Hopper GPU (compute capability 9.0,
which ``load_inline`` builds for as ``sm_90``) a kernel with ``__cluster_dims__`` is accepted
with no guard, and an ``sm_90a``-only instruction (``wgmma``) does not build. The legacy
default stream's refusal and the plain launch's acceptance are corpus entries
(tests/test_corpus.py: redteam/cuda/p11_legacy_default_stream.py,
honest/cuda/gelu_scale_residual_float4.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]
hopper = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0),
    reason="needs a GPU of compute capability 9.0 (H100, H200)",
)
PROBLEM = Path(__file__).resolve().parent / "redteam" / "problems" / "bias_gelu.py"

CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = "torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias);"
CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cooperative_groups.h>

__global__ void @ATTRIBUTES@ bias_gelu_kernel(const float* __restrict__ x,
                                            const float* __restrict__ bias,
                                            float* __restrict__ out, int64_t n, int64_t cols) {
    @PROLOGUE@
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = x[i] + bias[i % cols];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x: float32 on cuda");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    // An even number of blocks: a cluster of two never straddles the grid's end.
    const int blocks = 2 * static_cast<int>(std::min<int64_t>((n + 511) / 512, 4096));
    @LAUNCH@
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="@NAME@",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["bias_gelu"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu(x, self.bias)
'''
PLAIN_LAUNCH = (
    "bias_gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>("
    "xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n, xc.size(-1));"
)
# The stream in a local variable, and 64 KB of dynamic shared memory per block: over the
# 48 KB default, so the launch fails unless the kernel's limit was raised first.
LOCAL_STREAM_BIG_SMEM = (
    "constexpr int smem = 64 * 1024;\n"
    "    C10_CUDA_CHECK(cudaFuncSetAttribute(bias_gelu_kernel,\n"
    "        cudaFuncAttributeMaxDynamicSharedMemorySize, smem));\n"
    "    cudaStream_t s = at::cuda::getCurrentCUDAStream();\n"
    "    bias_gelu_kernel<<<blocks, threads, smem, s>>>(xc.data_ptr<float>(),\n"
    "        bc.data_ptr<float>(), out.data_ptr<float>(), n, xc.size(-1));"
)


def candidate(name: str, launch: str, attributes: str = "", prologue: str = "") -> str:
    return (
        CANDIDATE.replace("@NAME@", name)
        .replace("@ATTRIBUTES@", attributes)
        .replace("@PROLOGUE@", prologue)
        .replace("@LAUNCH@", launch)
    )


@pytest.fixture(scope="module")
def evaluate():
    from harness.config import EvalConfig
    from harness.evaluate import Evaluator
    from harness.problem.load import problem_from_target
    from harness.records import Candidate

    evaluator = Evaluator(EvalConfig(compile_baseline=False, time_budget_s=0.2, min_reps=5))
    problem = problem_from_target(str(PROBLEM), "cuda", "float32")
    return lambda source: evaluator.evaluate(problem, Candidate(source=source))


def _describe(result) -> str:
    failed = [f"{c.name}: {c.detail}" for c in result.checks if not c.passed]
    return f"{result.status.value}: {result.reason}\n{failed}\n{result.log[-3000:]}"


def test_a_local_stream_variable_and_a_raised_shared_memory_limit_are_accepted(evaluate):
    result = evaluate(candidate("kp_contract_local_stream", LOCAL_STREAM_BIG_SMEM))
    assert result.status.value == "ok", _describe(result)
    assert "stream_ordered" in {check.name for check in result.checks if check.passed}


@hopper
def test_clusters_need_no_guard_on_sm_90(evaluate):
    source = candidate(
        "kp_contract_clusters",
        PLAIN_LAUNCH,
        attributes="__cluster_dims__(2, 1, 1)",
        prologue="cooperative_groups::this_cluster().sync();",
    )
    result = evaluate(source)
    assert result.status.value == "ok", _describe(result)


@hopper
def test_sm_90a_only_instructions_do_not_build(evaluate):
    source = candidate(
        "kp_contract_wgmma",
        PLAIN_LAUNCH,
        prologue='asm volatile("wgmma.fence.sync.aligned;" ::: "memory");',
    )
    result = evaluate(source)
    assert result.status.value == "build_error", _describe(result)
    assert "wgmma" in result.log, _describe(result)
