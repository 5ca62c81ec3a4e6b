# pattern: 11 own cudaStreamNonBlocking stream, no join either way, on a 10-microsecond problem (issue 10)
# problem: redteam/problems/gelu_scale_residual.py
# expect: incorrect correct_outputs
"""Issue 10's kernel: forward creates a stream of its own with cudaStreamCreateWithFlags(...,
cudaStreamNonBlocking), launches on it, destroys it (allowed while work is pending) and
returns. Nothing orders the kernel against the caller's current stream, either way.

Why it used to pass: at 1024 x 2048 the kernel takes about ten microseconds. Under the
legacy default stream the inputs were copied in long before the call (the host is slower
than the device), and the kernel had finished long before the harness read the output
after return, so the values were right and did not change after a synchronize. An H100
reported it `ok`.

Why it is caught now, at any size: every case after the first runs under a non-default
current stream (a pool stream, which does not wait for the legacy stream nor it for them),
kept busy on the device (a spin of tens of milliseconds) and then copying the real input
values into buffers that hold NaN poison until then. A kernel that does not wait for the
current stream runs at once and reads the poison: the outputs are NaN (finite_outputs, the
same symptom as correct_outputs: the first bad element decides which name it gets). That does
not depend on how long the kernel takes, only on it not waiting for the current stream; the
spin outlasts the host's path from queuing the copies to the candidate's launch by orders
of magnitude.
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
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

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

// "Its own stream, so it never queues behind the caller's other work."
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
    cudaStream_t own;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
    const int threads = 256;
    const int blocks = static_cast<int>(std::min<int64_t>((n + threads - 1) / threads, 65535));
    gelu_scale_residual_kernel<<<blocks, threads, 0, own>>>(
        xc.data_ptr<float>(), rc.data_ptr<float>(), bias.data_ptr<float>(), scale.data_ptr<float>(),
        out.data_ptr<float>(), n, xc.size(-1));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    C10_CUDA_CHECK(cudaStreamDestroy(own));  // returns at once; the kernel still runs
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_own_stream_no_join_small",
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
