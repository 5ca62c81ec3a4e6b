"""LayerNorm over the last dim plus a residual. At initialization the affine part is an identity
(weight 1, bias 0), which a kernel must not rely on."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x) + residual


def get_inputs():
    return [torch.randn(256, 1024) * 2.0 + 0.5, torch.randn(256, 1024)]


def get_init_inputs():
    return [1024]
