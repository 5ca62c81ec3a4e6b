"""y = gelu(x + b) * s + r: a bias, an exact GELU, a per-feature scale and a residual, fused.

The size of issue 10's report (1024 x 2048 float32, 8 MiB per tensor): one pass over it takes
about ten microseconds on an H100, less than the host needs to look at the output after a
call returns. Used by the CUDA cheats about stream order: a kernel that skips the caller's
stream finishes long before anyone reads its output, so only inputs that are still being
produced on the current stream at the call (or a read that goes first) show the race. The
parameters start away from any identity (bias not zero, scale not one), and x and r are signed.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.5)
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(features))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias) * self.scale + residual


def get_inputs():
    return [torch.randn(1024, 2048), torch.randn(1024, 2048)]


def get_init_inputs():
    return [2048]
