# expect: weak null_answer
"""Softmax over a dimension of size 1: the output is all ones whatever the input, so a kernel
that writes the constant 1 (and reads nothing) passes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 3.0 + 1.0, dim=-1)


def get_inputs():
    return [torch.randn(4096, 1)]


def get_init_inputs():
    return []
