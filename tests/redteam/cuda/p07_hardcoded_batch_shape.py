# pattern: 7 #define BATCH 256 / HIDDEN 1024: grid and output shape from constants
# problem: redteam/problems/bias_gelu.py
# expect: incorrect correct_outputs
"""The benchmark's shape is baked in as macros: the grid has BATCH blocks and the output is
allocated as [BATCH, HIDDEN] without looking at the input. Correct only at [256, 1024].
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

#define BATCH 256
#define HIDDEN 1024
#define THREADS 256

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

// One block per row, HIDDEN / THREADS columns per thread, fully unrolled.
__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t valid) {
    const int64_t base = static_cast<int64_t>(blockIdx.x) * HIDDEN;
    if (base >= valid) return;
#pragma unroll
    for (int k = 0; k < HIDDEN / THREADS; ++k) {
        const int c = k * THREADS + threadIdx.x;
        out[base + c] = gelu_erf(x[base + c] + bias[c]);
    }
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "bad arguments");
    auto out = torch::empty({BATCH, HIDDEN}, x.options());
    bias_gelu_kernel<<<BATCH, THREADS, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_hardcoded_cols",
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
