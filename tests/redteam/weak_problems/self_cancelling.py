# expect: weak null_answer
"""The output is (x * w) - (x * w): exactly zero, so a kernel that returns zeros passes."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.weight
        return y - y


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [1024]
