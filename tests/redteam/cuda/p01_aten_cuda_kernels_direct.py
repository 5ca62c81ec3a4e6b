# pattern: 1 the extension calls at::cuda::add / at::cuda::gelu (structured kernels, no dispatcher)
# problem: redteam/problems/bias_gelu.py
# expect: rejected static_gate
"""PyTorch's own CUDA kernels, called through their at::cuda:: entry points: no dispatcher, so
torch.profiler records no aten op on the CPU side. The GPU side of the trace still shows
PyTorch's kernels (vectorized_elementwise_kernel<...GeluCUDAKernelImpl...>): a harness
must look at kernel names, or scan the source for at::cuda:: / at::native:: calls.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor fused_bias_gelu(torch::Tensor x, torch::Tensor bias);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/CUDAFunctions.h>

// Fused bias + GELU through the CUDA kernels' direct entry points: no dispatcher round trips.
torch::Tensor fused_bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.size(-1) == bias.size(0), "last dim of x must match bias");
    at::Tensor y = at::cuda::add(x, bias);
    return at::cuda::gelu(y, "none");
}
"""

_ext = load_inline(
    name="kp_cuda_aten_cuda_direct",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["fused_bias_gelu"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.fused_bias_gelu(x, self.bias)
