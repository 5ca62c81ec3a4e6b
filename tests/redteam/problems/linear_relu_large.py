"""Linear + ReLU at a size where the GEMM takes tens of milliseconds on a GPU in float32.

Used by the CUDA cheats whose trick is a race (work left running on a side stream): the work
must outlast the harness's look at the output for the race to be observable.
"""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(8192, 4096)]


def get_init_inputs():
    return [4096, 4096]
