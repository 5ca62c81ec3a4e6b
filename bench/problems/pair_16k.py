"""Two 16384 x 16384 float32 inputs (1 GiB each): y = tanh(a) * b + a.

Eager holds the inputs, two temporaries and the output at its peak (about 5 GiB). Issue 10's
memory goal on a 2-core, 24 GiB machine: verified one case at a time, where holding every
case at once was OOM-killed.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return torch.tanh(a) * b + a


def get_inputs():
    return [torch.randn(16384, 16384), torch.randn(16384, 16384)]


def get_init_inputs():
    return []
