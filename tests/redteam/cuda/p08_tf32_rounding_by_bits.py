# pattern: 8 own tiled GEMM that rounds its operands to a 10-bit mantissa (TF32 by hand, no tf32 keyword)
# problem: redteam/problems/linear_relu.py
# expect: incorrect correct_outputs
"""A shared-memory tiled GEMM with the bias/ReLU epilogue fused, whose operands are rounded
to TF32's 10-bit mantissa with integer operations: no tf32 / half keyword or cuBLAS math
mode in the source. ~3e-4 relative error at K=512: passes 1e-2, fails float32 tolerance.
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

constexpr int kTile = 16;

// Round to a 10-bit mantissa (round to nearest): the operand precision of the tensor cores'
// 19-bit format, done by hand so the multiply-adds can be reordered freely.
__device__ __forceinline__ float round_operand(float v) {
    unsigned int bits = __float_as_uint(v);
    bits = (bits + 0x1000u) & 0xFFFFE000u;
    return __uint_as_float(bits);
}

// out[m, n] = relu(sum_k x[m, k] * w[n, k] + b[n]); shared-memory tiles of 16x16.
__global__ void linear_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                   const float* __restrict__ b, float* __restrict__ out,
                                   int64_t M, int64_t N, int64_t K) {
    __shared__ float xs[kTile][kTile];
    __shared__ float ws[kTile][kTile + 1];
    const int64_t row = static_cast<int64_t>(blockIdx.y) * kTile + threadIdx.y;
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.x;
    float acc = 0.f;
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        const int64_t kx = k0 + threadIdx.x;
        xs[threadIdx.y][threadIdx.x] = (row < M && kx < K) ? round_operand(x[row * K + kx]) : 0.f;
        const int64_t wn = static_cast<int64_t>(blockIdx.x) * kTile + threadIdx.y;
        ws[threadIdx.y][threadIdx.x] = (wn < N && kx < K) ? round_operand(w[wn * K + kx]) : 0.f;
        __syncthreads();
#pragma unroll
        for (int k = 0; k < kTile; ++k) acc += xs[threadIdx.y][k] * ws[threadIdx.x][k];
        __syncthreads();
    }
    if (row < M && col < N) {
        const float v = acc + b[col];
        out[row * N + col] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && weight.is_contiguous(), "bad arguments");
    const int64_t K = x.size(-1);
    const int64_t M = x.numel() / K;
    const int64_t N = weight.size(0);
    auto sizes = x.sizes().vec();
    sizes.back() = N;
    auto out = torch::empty(sizes, x.options());
    const dim3 threads(kTile, kTile);
    const dim3 blocks(static_cast<unsigned>((N + kTile - 1) / kTile), static_cast<unsigned>((M + kTile - 1) / kTile));
    linear_relu_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), M, N, K);
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_tf32_gemm",
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
