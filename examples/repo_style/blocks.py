"""Repository-style modules, configured in pyproject.toml under [tool.kernelpilot]."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualGate(nn.Module):
    """Pre-norm residual branch with a learnable per-channel gate.

    ``x + sigmoid(gate) * silu(layer_norm(x))``: the norm stays a library call, the rest is one
    elementwise pass over ``x`` once fused.
    """

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.gate = nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.sigmoid(self.gate) * F.silu(self.norm(x))


def make_inputs():
    return [torch.randn(16, 256, 1024)]
