# pattern: 1 the "kernel" calls at::gelu with the profiler's callbacks switched off, so the op check sees no PyTorch compute
# problem: redteam/problems/bias_gelu.py
# expect: rejected static_gate
"""The extension's function adds the bias and calls at::gelu: PyTorch does all the work. Around
it, every RecordFunction callback handle is disabled (at::disableCallback) and re-enabled
afterwards, so the profiler records no aten op inside the forward and the check for PyTorch
compute sees a forward that only launched its own kernel. Caught by the kernel-source check
and by the built library's imported symbols (at::disableCallback).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
#include <ATen/record_function.h>

torch::Tensor bias_gelu(torch::Tensor x, torch::Tensor bias) {
    for (uint64_t handle = 1; handle < 256; ++handle) at::disableCallback(handle);
    auto out = at::gelu(x + bias);
    for (uint64_t handle = 1; handle < 256; ++handle) at::reenableCallback(handle);
    return out;
}
"""

_ext = load_inline(
    name="kp_profiler_off",
    cpp_sources=CPP_SOURCE,
    functions=["bias_gelu"],
    extra_cflags=["-O3"],
)


class ModelNew(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.bias_gelu(x.contiguous(), self.bias)
