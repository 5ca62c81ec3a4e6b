"""The pointwise op of a torch.nn module call (``nn.ReLU()``, ``nn.GELU("tanh")``, ``nn.Softmax(-1)``
...): the module spellings of ``agents.offline.ops``'s kinds."""

from __future__ import annotations

from typing import cast

import torch.nn as nn

from agents.offline.ops import Operand, PointwiseOp, gelu_op, valid_operands


def module_op(module: nn.Module, args: tuple, kwargs: dict) -> PointwiseOp | None:
    """The op of a torch.nn activation module called on one tensor, else None."""
    if kwargs or len(args) != 1:
        return None
    x = args[0]
    inplace = bool(getattr(module, "inplace", False))
    simple = {
        nn.ReLU: "relu",
        nn.SiLU: "silu",
        nn.Sigmoid: "sigmoid",
        nn.Tanh: "tanh",
        nn.Hardsigmoid: "hardsigmoid",
        nn.Hardswish: "hardswish",
        nn.Mish: "mish",
    }
    if type(module) in simple:
        return PointwiseOp(simple[type(module)], (x,), inplace)
    if isinstance(module, nn.GELU):
        return gelu_op(x, module.approximate)
    if isinstance(module, nn.Hardtanh):  # also nn.ReLU6
        return PointwiseOp("clamp", (x, module.min_val, module.max_val), inplace)
    if isinstance(module, nn.LeakyReLU):
        return PointwiseOp("leaky_relu", (x, module.negative_slope), inplace)
    if isinstance(module, nn.Softplus):
        return PointwiseOp("softplus", (x, module.beta, module.threshold))
    if type(module) in (nn.Softmax, nn.LogSoftmax):
        kind = "softmax" if type(module) is nn.Softmax else "log_softmax"
        operands = (x, module.dim)
        if not valid_operands(kind, operands):
            return None
        return PointwiseOp(kind, cast(tuple[Operand, ...], operands))
    return None
