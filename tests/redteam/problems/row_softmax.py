"""Softmax over the last dim. No parameter is tied to the row length, so the harness can change
it (an odd length exercises the tails of vectorized row loops)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(256, 1024) * 2.0]


def get_init_inputs():
    return []
