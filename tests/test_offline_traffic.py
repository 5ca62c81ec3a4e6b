"""The offline proposer's estimate of eager's cost (agents/offline/traffic.py): the
floating-point operations of every spelling of a matmul and a convolution, from the traced
shapes, and the bytes a call moves (views none)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import symbolic_trace
from torch.fx.passes.shape_prop import ShapeProp

from agents.offline import traffic


class Spellings(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 4)
        self.conv = nn.Conv2d(4, 6, 3, groups=2)
        self.up = nn.ConvTranspose2d(4, 6, 2)
        self.w = nn.Parameter(torch.randn(8, 16))
        self.b = nn.Parameter(torch.randn(16))

    def forward(self, x, img, a, b):
        return (
            self.linear(x),
            torch.addmm(self.b, x, self.w),
            x @ self.w,
            self.conv(img),
            self.up(img),
            F.conv2d(img, self.conv.weight, groups=2),
            torch.bmm(a, b),
            a.bmm(b),
            x.view(16).reshape(2, 8),
        )


def test_matmuls_and_convolutions_are_counted_in_every_spelling() -> None:
    graph_module = symbolic_trace(Spellings())
    inputs = (
        torch.randn(2, 8),
        torch.randn(1, 4, 6, 6),
        torch.randn(2, 3, 7),
        torch.randn(2, 7, 5),
    )
    ShapeProp(graph_module).propagate(*inputs)
    modules = dict(graph_module.named_modules())
    counted = {node.name: traffic.flops(node, modules) for node in graph_module.graph.nodes}
    assert counted["linear"] == ("matmul", 2 * (2 * 4) * 8)  # 2 x outputs x inputs per output
    assert counted["addmm"] == counted["matmul"] == ("matmul", 2 * (2 * 16) * 8)
    # each output of a grouped convolution reads in_channels / groups x the kernel's window
    assert counted["conv"] == counted["conv2d"] == ("conv", 2 * (6 * 4 * 4) * (4 // 2) * 9)
    # a transposed one spreads each input over out_channels / groups x the window
    assert counted["up"] == ("conv", 2 * (4 * 6 * 6) * 6 * 4)
    assert counted["bmm"] == counted["bmm_1"] == ("matmul", 2 * (2 * 3 * 5) * 7)
    assert counted["view"] is None and counted["x"] is None

    views = [node for node in graph_module.graph.nodes if node.name in ("view", "reshape")]
    assert [traffic.eager_bytes(node, modules) for node in views] == [0, 0]
    linear = next(node for node in graph_module.graph.nodes if node.name == "linear")
    # its input and output, and the layer's weight and bias
    assert traffic.eager_bytes(linear, modules) == 4 * (2 * 8 + 2 * 4 + 8 * 4 + 4)
