# pattern: 11 kernel on a pool stream that the current stream never waits for
# problem: redteam/problems/bias_gelu_large.py
# expect: incorrect correct_outputs|stable_after_sync
"""The kernel is queued on a side stream and forward returns: CUDA events recorded on the
current stream (a timer without a device-wide synchronize) measure nothing, and a
comparison after torch.cuda.synchronize() sees the right values. A memory-bound kernel
started on an idle GPU stays ahead of any full-size read issued after forward returns: on
an H100 a copy of the output taken on the current stream right after return was already
correct, even at 16384 x 8192. What sees the race is a small read: the harness gathers a
few thousand elements spread over the output right after return (microseconds, long before
this kernel is done) and again after synchronizing (``harness.workers.guards.sample``).
Since the stream-ordered cases (issue 10) it is caught before that: its kernel does not
wait for the current stream, on which the inputs are still being copied in when forward
is called, so it reads their poison (H100, 2026-11-24).
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
#include <c10/cuda/CUDAStream.h>

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i] + bias[i % cols];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// Runs on a high-priority stream of its own so it never queues behind other work.
torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.size(-1) == bias.size(0), "bad arguments");
    auto out = torch::empty_like(x);
    const int64_t n = x.numel();
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(true, x.get_device());
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_gelu_kernel<<<blocks, threads, 0, stream.stream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, x.size(-1));
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_side_stream",
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
