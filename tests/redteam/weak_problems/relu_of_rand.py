# expect: weak null_answer
"""ReLU of torch.rand inputs: every input is already non-negative, so returning the input
unchanged (identity, a null answer) matches the reference exactly."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.rand(256, 1024)]


def get_init_inputs():
    return []
