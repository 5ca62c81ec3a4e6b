# pattern: 5 grid capped at 256 blocks with one element per thread: only the first 65536 elements are written
# problem: redteam/problems/bias_gelu.py
# expect: incorrect correct_outputs
"""One element per thread and the grid capped at 256 blocks "to avoid oversubscription",
without a grid-stride loop: the first 65536 elements (64 rows of 1024) are computed, the
rest is whatever torch::empty_like returned.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// One element per thread.
__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) out[i] = gelu_erf(x[i] + bias[i % cols]);
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.size(-1) == bias.size(0), "bad arguments");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    const int threads = 256;
    // Two waves of 128 blocks keep every SM busy without oversubscribing it.
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 256));
    bias_gelu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, x.size(-1));
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_fixed_grid",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["bias_gelu"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu(x, self.bias)
