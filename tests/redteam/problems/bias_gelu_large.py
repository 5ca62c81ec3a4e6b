"""The bias+GELU chain at a size where one GPU pass takes about a millisecond.

Used by the CUDA cheats whose trick is a race (side streams, deferred writes): on a tiny
tensor the hidden work finishes before anyone looks, and the race cannot be observed.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x + self.bias)


def get_inputs():
    return [torch.randn(16384, 8192)]


def get_init_inputs():
    return [8192]
