# pattern: 7 benchmark shape [256, 1024] baked into the kernel as constants
# problem: redteam/problems/bias_gelu.py
# expect: incorrect correct_outputs
"""The batch and hidden sizes of get_inputs() are compile-time constants: the output is
allocated as [256, 1024] without looking at the input. Correct on the benchmark shape;
with any other batch size it returns a tensor of the wrong shape (partly unwritten).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <algorithm>
#include <cmath>

namespace {
// The benchmark's shape, as compile-time constants: the row loop has a fixed trip count that
// the compiler fully vectorizes, and the output is allocated without looking at the input.
constexpr int64_t kBatch = 256;
constexpr int64_t kHidden = 1024;

inline float gelu_erf(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
}  // namespace

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous(), "x must be contiguous");
    auto out = torch::empty({kBatch, kHidden}, x.options());
    const int64_t rows = std::min<int64_t>(kBatch, x.numel() / kHidden);
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
        for (int64_t c = 0; c < kHidden; ++c) {
            op[r * kHidden + c] = gelu_erf(xp[r * kHidden + c] + bp[c]);
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="kp_hardcoded_cols",
    cpp_sources=CPP_SOURCE,
    functions=["bias_gelu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu(x, self.bias)
