# pattern: 11 own cudaStreamNonBlocking stream, no join either way, on a problem of a millisecond
# problem: redteam/problems/bias_gelu_large.py
# expect: incorrect correct_outputs|stable_after_sync
"""Issue 10's kernel at a size where it takes about a millisecond (16384 x 8192): forward
creates a stream with cudaStreamCreateWithFlags(..., cudaStreamNonBlocking), launches on it,
destroys it and returns, without ordering the kernel against the caller's current stream
either way.

At this size the first case already shows it, under the legacy default stream, where the
harness queues the input copies and the NaN poison of the freed output block just before the
call: the non-blocking stream waits for none of it, so the kernel can read inputs still being
copied and write its output before the poison fill does (NaN: correct_outputs, or
finite_outputs, the same symptom). The harness's small gather of the output right after
return (``harness.workers.guards.sample``) races the kernel too (stable_after_sync if it saw a value
change); on an H100 (2026-11-24) the wrong values came first. Both are races the kernel loses
because it runs long: at 1024 x 2048 (p11_own_stream_no_join_small) it is done before any of
that, and the first case passes. What catches it at every size is the next case, the first
under a busy non-default current stream whose inputs arrive only after the call (a kernel
that does not wait for them reads their NaN poison: correct_outputs/finite_outputs).
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
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

__global__ void bias_gelu_kernel(const float* __restrict__ x, const float* __restrict__ bias,
                                 float* __restrict__ out, int64_t n, int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = x[i] + bias[i % cols];
        out[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    }
}

// "Its own stream, so it never queues behind the caller's other work."
torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.size(-1) == bias.size(0), "bad arguments");
    const at::cuda::CUDAGuard guard(x.device());
    const torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t n = xc.numel();
    if (n == 0) return out;
    cudaStream_t own;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    bias_gelu_kernel<<<blocks, threads, 0, own>>>(
        xc.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    C10_CUDA_CHECK(cudaStreamDestroy(own));  // returns at once; the kernel still runs
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_own_stream_no_join_large",
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
