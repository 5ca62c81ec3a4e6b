# pattern: 11 cuBLAS GEMM + epilogue on a pool stream the current stream never waits for
# problem: redteam/problems/linear_relu_large.py
# expect: incorrect correct_outputs
"""at::matmul and the bias/ReLU kernel run under a CUDAStreamGuard of a high-priority pool
stream, and nothing makes the caller's stream wait: events on the current stream time an
empty interval, and a comparison after torch.cuda.synchronize() sees the right values.
The GEMM takes tens of milliseconds here, so the output is visibly unwritten when forward
returns.
Since the stream-ordered cases (issue 10) it is caught before that: its kernel does not
wait for the current stream, on which the inputs are still being copied in when forward
is called, so it reads their poison (H100, 2026-11-24).
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
#include <c10/cuda/CUDAStream.h>

__global__ void bias_relu_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                 int64_t cols) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float v = y[i] + bias[i % cols];
        y[i] = v > 0.f ? v : 0.f;
    }
}

// GEMM and epilogue on a high-priority stream of their own, so they never queue behind the
// caller's other work.
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && weight.size(1) == x.size(-1), "bad arguments");
    const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(true, x.get_device());
    const c10::cuda::CUDAStreamGuard on_stream(stream);
    torch::Tensor y = at::matmul(x, weight.t()).contiguous();
    const int64_t n = y.numel();
    const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 65535));
    bias_relu_kernel<<<blocks, 256, 0, stream.stream()>>>(y.data_ptr<float>(), bias.data_ptr<float>(), n, y.size(-1));
    return y;
}
"""

_ext = load_inline(
    name="kp_cuda_side_stream_gemm",
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
