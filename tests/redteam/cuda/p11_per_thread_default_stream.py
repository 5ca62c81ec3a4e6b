# pattern: 11 built for the per-thread default stream (-DCUDA_API_PER_THREAD_DEFAULT_STREAM): the launch with no stream goes to the thread's own stream
# problem: redteam/problems/gelu_scale_residual.py
# expect: incorrect correct_outputs|stable_after_sync
"""With CUDA_API_PER_THREAD_DEFAULT_STREAM defined (an allowed -D flag), `kernel<<<grid, block>>>`
launches on the calling thread's per-thread default stream, through the runtime's _ptsz
entry points, and not on the caller's current stream. The host first waits for the current
stream, so the inputs are there; nothing makes the current stream wait for the per-thread
stream, which does not synchronize with PyTorch's non-blocking pool streams.
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
    C10_CUDA_CHECK(cudaStreamSynchronize(at::cuda::getCurrentCUDAStream().stream()));
    gelu_scale_residual_kernel<<<blocks, threads>>>(  // no stream: this thread's default stream
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_per_thread_default_stream",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["gelu_scale_residual"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3", "-DCUDA_API_PER_THREAD_DEFAULT_STREAM"],
)

class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.5)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_scale_residual(x, residual, self.bias, self.scale)
