# pattern: 8 torch.set_float32_matmul_precision('medium') so the library GEMM may use bf16
# problem: redteam/problems/linear_relu.py
# expect: rejected static_gate
"""One global call lowers the precision of every float32 matmul in the process (bf16 passes in
oneDNN on CPUs that have them, TF32 on GPUs): the candidate's GEMM and, in a naive harness,
the eager reference too, so they still agree with each other.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// relu(x @ weight^T + bias): the GEMM is the library's (at::matmul, which the reference's
// nn.Linear also uses); the bias add and ReLU run as one pass of our own over its result.
torch::Tensor linear_relu(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kFloat32, "x must be float32 on cpu");
    TORCH_CHECK(weight.dim() == 2 && weight.size(1) == x.size(-1), "weight must be [out, in]");
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "bias must be [out]");
    torch::Tensor y = at::matmul(x, weight.t()).contiguous();
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
    functions=["linear_relu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


torch.set_float32_matmul_precision("medium")


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.linear_relu(x, self.linear.weight, self.linear.bias)
