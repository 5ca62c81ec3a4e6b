"""bias + GELU at [2048, 8192] float32 (16.8M elements, 64 MiB per tensor): large enough that
the harness's own per-element work (comparisons, input factories, case files) shows in a
profile on a 2-core CPU. Used by bench/profile_reference.py and docs/measurement-notes.md."""

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
    return [torch.randn(2048, 8192)]


def get_init_inputs():
    return [8192]
