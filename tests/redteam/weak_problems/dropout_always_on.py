# expect: weak nondeterministic
"""Dropout forced on (training=True) even in eval(): two runs of the reference on the same
input disagree, so no kernel can be checked against it."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(torch.tanh(x), p=self.p, training=True)


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [0.5]
