# pattern: 6 warp-per-row softmax, 4 elements per lane without a tail check: reads past each row's end
# problem: redteam/problems/row_softmax.py
# expect: incorrect finite_outputs
"""One warp per row, each lane taking 4 consecutive elements per step without checking the
last three against the row length ("row lengths are multiples of 4"). Exact at 1024
columns; at 1027 every row's max and sum take in the next row's first elements and the
last row reads past the end of the input (NaN in the harness's guard region).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor softmax_lastdim(torch::Tensor x);
"""

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

constexpr int kWarpsPerBlock = 8;
constexpr int kPerLane = 4;  // row lengths are multiples of 4: 4 consecutive elements per lane

__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ out, int64_t rows,
                               int64_t cols) {
    const int lane = threadIdx.x % 32;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (row >= rows) return;
    const float* xr = x + row * cols;
    float m = -INFINITY;
    for (int64_t c = lane * kPerLane; c < cols; c += 32 * kPerLane) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) m = fmaxf(m, xr[c + k]);
    }
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    float s = 0.f;
    for (int64_t c = lane * kPerLane; c < cols; c += 32 * kPerLane) {
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) s += __expf(xr[c + k] - m);
    }
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    const float inv = 1.0f / s;
    for (int64_t c = lane; c < cols; c += 32) out[row * cols + c] = __expf(xr[c] - m) * inv;
}

torch::Tensor softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "x must be contiguous on cuda");
    const int64_t cols = x.size(-1);
    const int64_t rows = x.numel() / cols;
    auto out = torch::empty_like(x);
    const int64_t blocks = (rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
    softmax_kernel<<<static_cast<unsigned>(blocks), kWarpsPerBlock * 32, 0,
                     at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>(), out.data_ptr<float>(), rows, cols);
    return out;
}
"""

_ext = load_inline(
    name="kp_cuda_softmax_overread",
    cpp_sources=CPP_SOURCE,
    cuda_sources=CUDA_SOURCE,
    functions=["softmax_lastdim"],
    extra_cflags=["-O3"],
    extra_cuda_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_lastdim(x)
