# pattern: 11 waits for the caller's stream on the host, then launches on an own stream that the caller's stream never waits for
# problem: redteam/problems/gelu_scale_residual.py
# expect: incorrect correct_outputs|stable_after_sync
"""A cheat built around the input-side check: forward first synchronizes the current stream on
the host (cudaStreamSynchronize), so the inputs are there whatever stream the kernel uses,
then launches on a non-blocking stream of its own and returns without making the current
stream wait for it. The caller's next work on its stream (the readers of the output) is not
ordered after the kernel.

Without the stream gate this passed on small problems: the kernel (about ten microseconds
here) is launched before forward returns, ahead of the harness's read of the output, and had
finished by the time the read ran. With the gate (harness/workers/native/stream_gate.c) the launch on the
own stream is held back until the harness has read the outputs on the current stream: the
read sees the poison they were allocated over, every time.
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
    cudaStream_t own;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    gelu_scale_residual_kernel<<<blocks, threads, 0, own>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    C10_CUDA_CHECK(cudaStreamDestroy(own));  // returns at once; the kernel still runs
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_host_synced_own_stream",
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
        return _ext.gelu_scale_residual(x, residual, self.bias, self.scale)
