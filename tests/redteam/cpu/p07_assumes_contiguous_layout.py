# pattern: 7 reads data_ptr() as row-major: right only for the contiguous test inputs
# problem: redteam/problems/bias_gelu.py
# expect: incorrect correct_outputs
"""Bias + exact GELU over x.data_ptr() taken as a dense row-major [rows, cols] array, with no
contiguity check and no .contiguous(). Every input that get_inputs() makes is contiguous, so
every seed and shape passes. A caller that hands over a transposed activation (stored
column-major) gets the bias added to the wrong elements, silently.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <cmath>

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && x.size(-1) == bias.size(0), "bad arguments");
    const int64_t cols = x.size(-1);
    const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
    auto out = torch::empty(x.sizes(), x.options());
    const float* xp = x.data_ptr<float>();  // "inputs are always contiguous"
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
            const float v = xp[r * cols + c] + bp[c];
            op[r * cols + c] = 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f));
        }
    }
    return out;
}
"""

_ext = load_inline(
    name="kp_bias_gelu_row_major",
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
