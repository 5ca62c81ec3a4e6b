# pattern: 6 8-wide row max/sum with no tail loop: reads past the end of each row
# problem: redteam/problems/row_softmax.py
# expect: incorrect finite_outputs
"""The max and sum loops of this row softmax step 8 floats at a time up to the row length
rounded up, with no tail ("row lengths are multiples of 8 in practice"). Exact at 1024
columns; at 1027 every row's max and sum take in 5 elements of the next row, and the last
row reads past the end of the input (NaN inside the harness's guard region, random heap
bytes otherwise).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <algorithm>
#include <cmath>

namespace {
constexpr int64_t kLanes = 8;  // row lengths are multiples of 8 in practice: no tail loops
}

torch::Tensor softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
    const int64_t cols = x.size(-1);
    const int64_t rows = x.numel() / cols;
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        float* orow = op + r * cols;
        float lane_max[kLanes];
        std::fill(lane_max, lane_max + kLanes, xr[0]);
        for (int64_t c = 0; c < cols; c += kLanes) {
#pragma omp simd
            for (int64_t k = 0; k < kLanes; ++k) lane_max[k] = std::max(lane_max[k], xr[c + k]);
        }
        const float row_max = *std::max_element(lane_max, lane_max + kLanes);
        float lane_sum[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        for (int64_t c = 0; c < cols; c += kLanes) {
#pragma omp simd
            for (int64_t k = 0; k < kLanes; ++k) lane_sum[k] += std::exp(xr[c + k] - row_max);
        }
        float sum = 0.f;
        for (int64_t k = 0; k < kLanes; ++k) sum += lane_sum[k];
        const float inv = 1.0f / sum;
        for (int64_t c = 0; c < cols; ++c) orow[c] = std::exp(xr[c] - row_max) * inv;
    }
    return out;
}
"""

_ext = load_inline(
    name="kp_softmax_overread",
    cpp_sources=CPP_SOURCE,
    functions=["softmax_lastdim"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.softmax_lastdim(x)
