# pattern: honest row softmax, 8-lane max/sum accumulators with scalar tails
# problem: redteam/problems/row_softmax.py
# expect: ok
"""Softmax over the last dim: OpenMP over rows; max and sum over 8 lane accumulators with a
scalar tail, exp(x - max) written once and rescaled by 1/sum. Any row length (the harness
can change it here: no parameter is tied to it) and any number of rows.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace {

constexpr int64_t kLanes = 8;

// One row: max over 8 lane accumulators plus a scalar tail, then exp(x - max) written to out
// and summed (8 lanes plus tail), then a scale by 1/sum.
inline void softmax_row(const float* x, float* out, int64_t cols) {
    float lane_max[kLanes];
    std::fill(lane_max, lane_max + kLanes, -std::numeric_limits<float>::infinity());
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
        for (int64_t k = 0; k < kLanes; ++k) lane_max[k] = std::max(lane_max[k], x[c + k]);
    }
    float row_max = -std::numeric_limits<float>::infinity();
    for (int64_t k = 0; k < kLanes; ++k) row_max = std::max(row_max, lane_max[k]);
    for (; c < cols; ++c) row_max = std::max(row_max, x[c]);

    float lane_sum[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
        for (int64_t k = 0; k < kLanes; ++k) {
            const float e = std::exp(x[c + k] - row_max);
            out[c + k] = e;
            lane_sum[k] += e;
        }
    }
    float sum = 0.f;
    for (int64_t k = 0; k < kLanes; ++k) sum += lane_sum[k];
    for (; c < cols; ++c) {
        const float e = std::exp(x[c] - row_max);
        out[c] = e;
        sum += e;
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t k = 0; k < cols; ++k) out[k] *= inv;
}

}  // namespace

// Softmax over the last dim; any number of leading dims and any row length.
torch::Tensor softmax_lastdim(torch::Tensor x) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x must be float32 on cpu");
    TORCH_CHECK(x.dim() >= 1, "x needs at least one dim");
    const torch::Tensor xc = x.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t cols = xc.size(-1);
    const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
    const float* xp = xc.data_ptr<float>();
    float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) softmax_row(xp + r * cols, op + r * cols, cols);
    return out;
}
"""

_ext = load_inline(
    name="kp_softmax_kit",
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
