# pattern: honest kernel under a Python side stream (torch.cuda.Stream), joined both ways with wait_stream
# problem: redteam/problems/gelu_scale_residual.py
# expect: ok
"""PyTorch's own idiom for side streams: the side stream waits for the caller's stream, the
kernel runs with the side stream current, the caller's stream waits for the side stream, and
the output (allocated on the side stream) is recorded as used on the caller's stream so that
the allocator does not hand its memory to the side stream's later work too early.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias, torch::Tensor scale);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void gelu_scale_residual_kernel(const float* __restrict__ x, const float* __restrict__ r,
                                           const float* __restrict__ bias,
                                           const float* __restrict__ scale, float* __restrict__ out,
                                           int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int64_t c = i % cols;
        out[i] = gelu_erf(x[i] + bias[c]) * scale[c] + r[i];
    }
}

torch::Tensor gelu_scale_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor bias,
                                  torch::Tensor scale) {
    TORCH_CHECK(x.is_cuda() && residual.sizes() == x.sizes(), "bad arguments");
    TORCH_CHECK(bias.numel() == x.size(-1) && scale.numel() == x.size(-1), "bad parameters");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_gsr_python_side_stream_joined",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["gelu_scale_residual"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)

class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.5)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        caller = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            out = _ext.gelu_scale_residual(x, residual, self.bias, self.scale)
        caller.wait_stream(side)
        out.record_stream(caller)  # allocated on the side stream, used on the caller's
        return out
