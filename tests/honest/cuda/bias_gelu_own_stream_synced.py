# pattern: honest own CUDA stream, ordered both ways against the current stream with events
# problem: redteam/problems/bias_gelu_large.py
# expect: ok
"""The kernel runs on a pool stream; an event makes it wait for the current stream's queued
work, and a second event makes the current stream wait for the kernel before forward
returns. Legitimate use of a side stream: nothing is left running that the caller's
stream does not wait for.
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
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace {

__device__ __forceinline__ float gelu_erf(float v) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
}

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        out[i] = gelu_erf(x[i] + bias[i % cols]);
    }
}

}  // namespace

// The kernel runs on a stream of its own (from PyTorch's pool), ordered both ways against the
// caller's current stream: it starts after everything already queued there (the producers of x
// and bias) and the current stream waits for it before anything queued later (the consumers of
// out, and the allocator's reuse of these blocks).
torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "x must be float32 on cuda");
    TORCH_CHECK(bias.dim() == 1 && x.size(-1) == bias.size(0), "last dim of x must match bias");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    const c10::cuda::CUDAStream current = at::cuda::getCurrentCUDAStream();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, x.get_device());
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(current);
    inputs_ready.block(side);
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_gelu_kernel<<<blocks, threads, 0, side.stream()>>>(
        xc.data_ptr<float>(), bc.data_ptr<float>(), out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(current);
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_own_stream",
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
