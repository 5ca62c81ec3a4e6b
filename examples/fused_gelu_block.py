"""A Linear layer followed by a chain of elementwise ops: bias, tanh-GELU, residual, scale, clamp.

KernelBench format. The matmul stays a library call; in eager PyTorch each of the five
elementwise ops after it reads and writes the whole [4096, 1024] activation, which a fused
kernel does in one pass.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4096
in_features = 256
out_features = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int, scale: float = 0.5):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(out_features) * 0.1)
        self.scale = scale

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        y = F.gelu(y + self.bias, approximate="tanh")
        y = (y + residual) * self.scale
        return torch.clamp(y, -2.0, 2.0)


def get_inputs():
    return [torch.randn(batch_size, in_features), torch.randn(batch_size, out_features)]


def get_init_inputs():
    return [in_features, out_features]
