"""A complete candidate for examples/fused_gelu_block.py on cpu (C++ with OpenMP).

The Linear stays a PyTorch library call (the reference runs it too); the five elementwise ops
after it (bias add, tanh-GELU, residual add, scale, clamp) run as one OpenMP pass of our own,
so the [batch, out_features] activation is read and written once instead of five times.
The agent prompts show this file as the shape a candidate takes; it passes
`kernelpilot evaluate examples/fused_gelu_block.py examples/candidates/fused_gelu_block_cpu.py
--device cpu`.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

#include <cstdint>
#include <cstring>

namespace {

// e^x, branch-free (selects only) so that the OpenMP simd loop below vectorizes: libm's expf
// and tanhf are scalar calls, several times slower than ATen's vectorized kernels. Cody-Waite
// range reduction and the Cephes polynomial; under 2 ulp for x in [-87, 88] (clamped there).
inline float exp_vec(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof(two_n));
    return p * two_n;
}

// The tanh approximation of GELU, 0.5 v (1 + tanh(u)), written as v / (1 + e^(-2u)): the same
// function without the cancellation of 1 + tanh(u) for negative u.
inline float gelu_tanh(float v) {
    const float u = 0.7978845608028654f * (v + 0.044715f * v * v * v);
    return v / (1.0f + exp_vec(-2.0f * u));
}

}  // namespace

// out = clamp((gelu_tanh(y + bias) + residual) * scale, -2, 2), a new tensor shaped like y.
// Any number of leading dims; inputs in any memory layout (made contiguous first).
torch::Tensor bias_gelu_residual_clamp(torch::Tensor y, torch::Tensor bias,
                                       torch::Tensor residual, double scale) {
    TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == torch::kFloat32, "y: float32 on cpu");
    TORCH_CHECK(residual.sizes() == y.sizes() && residual.scalar_type() == torch::kFloat32,
                "residual must match y");
    TORCH_CHECK(y.dim() >= 1 && bias.dim() == 1 && bias.size(0) == y.size(-1),
                "bias must match the last dim of y");
    const torch::Tensor yc = y.contiguous();
    const torch::Tensor rc = residual.contiguous();
    const torch::Tensor bc = bias.contiguous();
    torch::Tensor out = torch::empty_like(yc);
    const int64_t cols = yc.size(-1);
    const int64_t rows = cols == 0 ? 0 : yc.numel() / cols;
    const float* yp = yc.data_ptr<float>();
    const float* rp = rc.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float s = static_cast<float>(scale);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        const float* yrow = yp + r * cols;
        const float* rrow = rp + r * cols;
        float* orow = op + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            const float v = (gelu_tanh(yrow[c] + bp[c]) + rrow[c]) * s;
            orow[c] = v < -2.0f ? -2.0f : (v > 2.0f ? 2.0f : v);
        }
    }
    return out;
}
"""

# Compiled once, when the module is imported: never lazily inside forward.
_ext = load_inline(
    name="kp_example_fused_gelu_block_cpu",
    cpp_sources=CPP_SOURCE,
    functions=["bias_gelu_residual_clamp"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    """Same constructor and parameters as the reference, so its state_dict loads strictly."""

    def __init__(self, in_features: int, out_features: int, scale: float = 0.5):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.linear.weight)  # the library matmul the reference also runs
        return _ext.bias_gelu_residual_clamp(y, self.bias, residual, self.scale)
