# pattern: honest OpenMP row reduction with vector accumulators and tail
# problem: redteam/problems/layernorm_residual.py
# expect: ok
"""LayerNorm + affine + residual in one pass over each row: OpenMP over rows, 8 float
accumulators for the two-pass mean/variance with a scalar tail, then the affine step and
the residual add. The affine parameters are always applied (they are only an identity at
initialization).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <cmath>

namespace {

constexpr int64_t kLanes = 8;

// Mean and biased variance of one row, two passes, 8 independent float accumulators (the
// compiler keeps them in one vector register) and a scalar tail.
inline void row_moments(const float* x, int64_t cols, float* mean_out, float* var_out) {
    float acc[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    int64_t c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
        for (int64_t k = 0; k < kLanes; ++k) acc[k] += x[c + k];
    }
    float sum = 0.f;
    for (int64_t k = 0; k < kLanes; ++k) sum += acc[k];
    for (; c < cols; ++c) sum += x[c];
    const float mean = sum / static_cast<float>(cols);

    float sq[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    c = 0;
    for (; c + kLanes <= cols; c += kLanes) {
#pragma omp simd
        for (int64_t k = 0; k < kLanes; ++k) {
            const float d = x[c + k] - mean;
            sq[k] += d * d;
        }
    }
    float ssq = 0.f;
    for (int64_t k = 0; k < kLanes; ++k) ssq += sq[k];
    for (; c < cols; ++c) {
        const float d = x[c] - mean;
        ssq += d * d;
    }
    *mean_out = mean;
    *var_out = ssq / static_cast<float>(cols);
}

}  // namespace

// out = layer_norm(x) * weight + bias + residual over the last dim; any number of leading dims.
// affine=false skips the weight/bias step (for a LayerNorm built with elementwise_affine=False).
torch::Tensor ln_residual(torch::Tensor x, torch::Tensor residual, torch::Tensor weight,
                          torch::Tensor bias, double eps, bool affine) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x must be float32 on cpu");
    TORCH_CHECK(residual.sizes() == x.sizes() && residual.scalar_type() == torch::kFloat32,
                "residual must match x");
    const int64_t cols = x.size(-1);
    TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
    const torch::Tensor xc = x.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor wc = weight.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(xc);
    const int64_t rows = cols == 0 ? 0 : xc.numel() / cols;
    const float* xp = xc.data_ptr<float>();
    const float* rp = rc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float feps = static_cast<float>(eps);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* xr = xp + r * cols;
        const float* rr = rp + r * cols;
        float* orow = op + r * cols;
        float mean, var;
        row_moments(xr, cols, &mean, &var);
        const float rstd = 1.0f / std::sqrt(var + feps);
        if (affine) {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) orow[c] = (xr[c] - mean) * rstd * wp[c] + bp[c] + rr[c];
        } else {
#pragma omp simd
            for (int64_t c = 0; c < cols; ++c) orow[c] = (xr[c] - mean) * rstd + rr[c];
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="kp_ln_kit",
    cpp_sources=CPP_SOURCE,
    functions=["ln_residual"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.ln_residual(x, residual, self.norm.weight, self.norm.bias, self.norm.eps, True)
