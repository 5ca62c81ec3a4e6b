"""A complete candidate for examples/fused_gelu_block.py on cuda (CUDA C++).

The Linear stays a PyTorch library call (cuBLAS, as in the reference); the five elementwise
ops after it (bias add, tanh-GELU, residual add, scale, clamp) run as one kernel, so the
[batch, out_features] activation is read and written once instead of five times. The kernel
is launched on at::cuda::getCurrentCUDAStream(): ordered after what the caller queued there
and before what it queues next, whichever stream is current. The agent prompts show this file
as the shape a cuda candidate takes.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor bias_gelu_residual_clamp(torch::Tensor y, torch::Tensor bias,
                                       torch::Tensor residual, double scale);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

__device__ __forceinline__ float gelu_tanh(float v) {
    const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + tanhf(inner));
}

// Elements [0, n) of the flattened [rows, cols] tensors, in a grid-stride loop (any size).
__global__ void bias_gelu_residual_clamp_kernel(const float* __restrict__ y,
                                                const float* __restrict__ bias,
                                                const float* __restrict__ residual,
                                                float* __restrict__ out, float scale,
                                                int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float v = (gelu_tanh(y[i] + bias[i % cols]) + residual[i]) * scale;
        out[i] = fminf(fmaxf(v, -2.0f), 2.0f);
    }
}

}  // namespace

// out = clamp((gelu_tanh(y + bias) + residual) * scale, -2, 2), a new tensor shaped like y.
// Any number of leading dims; inputs in any memory layout (made contiguous first).
torch::Tensor bias_gelu_residual_clamp(torch::Tensor y, torch::Tensor bias,
                                       torch::Tensor residual, double scale) {
    TORCH_CHECK(y.is_cuda() && y.scalar_type() == torch::kFloat32, "y: float32 on cuda");
    TORCH_CHECK(residual.sizes() == y.sizes() && residual.scalar_type() == torch::kFloat32,
                "residual must match y");
    TORCH_CHECK(y.dim() >= 1 && bias.dim() == 1 && bias.size(0) == y.size(-1),
                "bias must match the last dim of y");
    const at::cuda::CUDAGuard guard(y.device());
    const torch::Tensor yc = y.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(yc);
    const int64_t n = yc.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_gelu_residual_clamp_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        yc.data_ptr<float>(), bc.data_ptr<float>(), rc.data_ptr<float>(), out.data_ptr<float>(),
        static_cast<float>(scale), n, yc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

# Compiled once, when the module is imported: never lazily inside forward.
_ext = load_inline(
    name="kp_example_fused_gelu_block_cuda",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["bias_gelu_residual_clamp"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    """Same constructor and parameters as the reference, so its state_dict loads strictly."""

    def __init__(self, in_features: int, out_features: int, scale: float = 0.5):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight)  # the library matmul the reference also runs
        return _ext.bias_gelu_residual_clamp(y, self.bias, residual, self.scale)
