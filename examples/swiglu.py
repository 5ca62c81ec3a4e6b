"""A SwiGLU gate with a learnable per-channel gain: silu(gate) * up * gain.

KernelBench format. ``gate`` and ``up`` are the two halves of one fused projection (``chunk``
views, each row-strided), the gain broadcasts over the rows: three eager elementwise passes, one
fused one.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 2048
hidden = 2048


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.gain = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, projected: torch.Tensor) -> torch.Tensor:
        gate, up = projected.chunk(2, dim=-1)
        return F.silu(gate) * up * self.gain


def get_inputs():
    return [torch.randn(batch_size, 2 * hidden)]


def get_init_inputs():
    return [hidden]
