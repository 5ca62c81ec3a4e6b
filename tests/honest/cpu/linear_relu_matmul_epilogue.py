# pattern: honest library matmul + fused bias/ReLU epilogue
# problem: redteam/problems/linear_relu.py
# expect: ok
"""The GEMM is torch.matmul (the library op nn.Linear itself uses), called from Python; the bias
add and the ReLU run as one OpenMP pass of our own over the GEMM's result, in place on that fresh
buffer. (A kernel that starts OpenMP threads may not call PyTorch ops from C++: ops run on those
threads would escape the profiler.)
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// y = relu(y + bias), in place over the fresh GEMM result y (contiguous, [rows, cols]).
torch::Tensor bias_relu_(torch::Tensor y, torch::Tensor bias) {
    TORCH_CHECK(y.device().is_cpu() && y.scalar_type() == torch::kFloat32, "y must be float32 on cpu");
    TORCH_CHECK(y.is_contiguous(), "y must be contiguous");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == y.size(-1), "bias must be [out]");
    const torch::Tensor bc = bias.contiguous();
    const int64_t cols = y.size(-1);
    const int64_t rows = cols == 0 ? 0 : y.numel() / cols;
    float* yp = y.data_ptr<float>();
    const float* bp = bc.data_ptr<float>();
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
        float* row = yp + r * cols;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            const float v = row[c] + bp[c];
            row[c] = v > 0.f ? v : 0.f;
        }
    }
    return y;
}
"""

_ext = load_inline(
    name="kp_linear_kit",
    cpp_sources=CPP_SOURCE,
    functions=["bias_relu_"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, self.linear.weight.t()).contiguous()
        return _ext.bias_relu_(y, self.linear.bias)
