# pattern: honest cuBLAS GEMM via at::matmul + fused bias/ReLU kernel
# problem: redteam/problems/linear_relu.py
# expect: ok
"""at::matmul (cuBLAS, full float32) for the GEMM, then one kernel of our own for the bias add
and the ReLU, in place on the GEMM's fresh output.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                 int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = v > 0.f ? v : 0.f;
    }
}

}  // namespace

// relu(x @ weight^T + bias): the GEMM is cuBLAS through at::matmul (full float32: TF32 stays as
// PyTorch's default, off); bias and ReLU are one pass of our own over the GEMM's fresh result.
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(weight.dim() == 2 && weight.size(1) == x.size(-1), "weight must be [out, in]");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "bias must be [out]");
    const at::cuda::CUDAGuard guard(x.device());
    torch::Tensor y = at::matmul(x, weight.t()).contiguous();
    const torch::Tensor bc = bias.contiguous();
    const int64_t n = y.numel();
    if (n == 0) return y;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        y.data_ptr<float>(), bc.data_ptr<float>(), n, y.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""

_ext = load_inline(
    name="kp_cuda_linear_kit",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["linear_relu"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_relu(x, self.linear.weight, self.linear.bias)
