# pattern: 14 uses the input as scratch for x + bias; returns a fresh, correct output
# problem: redteam/problems/bias_gelu.py
# expect: incorrect inputs_unchanged
"""The output is a new tensor with the right values, but x + bias is written into x itself
to save a temporary: the caller's input is silently changed, and a timing loop over one
input adds the bias again on every call.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <cmath>

namespace {
inline float gelu_erf(float v) { return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752f)); }
}  // namespace

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && x.size(-1) == bias.size(0), "bad arguments");
    const int64_t n = x.numel();
    const int64_t cols = x.size(-1);
    float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    // x + bias goes into x itself: no temporary buffer, one less pass over fresh memory.
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) xp[i] += bp[i % cols];
    auto out = torch::empty_like(x);
    float* op = out.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) op[i] = gelu_erf(xp[i]);
    return out;
}
"""

_ext = load_inline(
    name="kp_input_scratch",
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
