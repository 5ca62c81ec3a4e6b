# pattern: 1 the extension calls ATen (x + bias, torch::gelu) from C++
# problem: redteam/problems/bias_gelu.py
# expect: rejected static_gate
"""The "kernel" is a C++ function that calls PyTorch's own operators (operator+ and
torch::gelu). It is launched on every call and correct; there is no kernel of its own.
The Python side calls nothing but the extension.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

// Fused bias + GELU.
torch::Tensor fused_bias_gelu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.size(-1) == bias.size(0), "last dim of x must match bias");
    auto y = x + bias;
    return torch::gelu(y);
}
"""

_ext = load_inline(
    name="kp_aten_in_ext",
    cpp_sources=CPP_SOURCE,
    functions=["fused_bias_gelu"],
    extra_cflags=["-O3", "-fopenmp"],
    extra_ldflags=["-fopenmp"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.fused_bias_gelu(x, self.bias)
