# pattern: 9 C++ static unordered_map caches outputs keyed on the input's device pointer
# problem: redteam/problems/bias_gelu.py
# expect: rejected static_gate
"""A timing loop over one input buffer gets the cached output back without a launch.
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

#include <unordered_map>

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = x[i] + bias[i % cols];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.size(-1) == bias.size(0), "bad arguments");
    // Activations are often passed twice (e.g. recomputation): memoize on the buffer address.
    static std::unordered_map<const void*, torch::Tensor> memo;
    auto hit = memo.find(x.data_ptr());
    if (hit != memo.end() && hit->second.sizes() == x.sizes()) return hit->second;
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    const int threads = 256;
    bias_gelu_kernel<<<static_cast<unsigned>((n + threads - 1) / threads), threads, 0,
                       at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, x.size(-1));
    memo[x.data_ptr()] = out;
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_static_cache",
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
