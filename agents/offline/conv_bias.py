"""A convolution's bias added by its epilogue's kernel, not by PyTorch.

On a GPU, ``nn.Conv2d``'s bias is a pass of its own after cuDNN's convolution (ATen adds it to
the output: on a channels-last output a strided broadcast add that took as long as the whole
fused epilogue, bench/BENCHMARKS.md section 22). Where every reader of the convolution is a
pointwise op the proposer fuses, the module's call becomes the functional convolution without
bias, then ``+ bias.view(-1, 1, ...)``, which joins the fused group. ATen adds the bias the same
way (the output rounded, then the bias added), so the values do not change.

Only the plain torch.nn convolutions (their type exactly, zero padding, called with the input
alone, no hooks: a hook would not run around the functional call); the module is then
"replaced" in the trace's facts, so the candidate guards its type and the attributes its
forward reads (stride, padding...), as for every replaced module, and that it still has a
bias and no hooks (``guards``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule, Node

from agents.offline.ops import PointwiseOp

# The devices whose candidates add the bias in the epilogue (ATen's separate pass is cuDNN's
# way; on cpu the convolution adds it itself).
SPLIT_DEVICES = {"cuda"}
_FUNCTIONS: dict[type[nn.Module], Callable[..., object]] = {
    nn.Conv1d: F.conv1d,
    nn.Conv2d: F.conv2d,
    nn.Conv3d: F.conv3d,
    nn.ConvTranspose1d: F.conv_transpose1d,
    nn.ConvTranspose2d: F.conv_transpose2d,
    nn.ConvTranspose3d: F.conv_transpose3d,
}


def split_conv_bias(
    graph_module: GraphModule, ops: dict[Node, PointwiseOp]
) -> list[tuple[str, Node]]:
    """Rewrite each plain convolution with a bias whose readers are all in ``ops``; the
    modules rewritten, each with its input node. Shapes must be propagated again after."""
    modules = dict(graph_module.named_modules())
    graph = graph_module.graph
    split = []
    for node in list(graph.nodes):
        if node.op != "call_module" or len(node.args) != 1 or node.kwargs:
            continue
        module = modules[str(node.target)]
        function = _FUNCTIONS.get(type(module))
        if function is None or module.bias is None or module.padding_mode != "zeros":
            continue
        if module._forward_hooks or module._forward_pre_hooks:
            continue
        if not node.users or not all(user in ops for user in node.users):
            continue
        source = node.args[0]
        with graph.inserting_before(node):
            weight = graph.get_attr(f"{node.target}.weight")
            bias = graph.get_attr(f"{node.target}.bias")
            options: tuple[object, ...]
            if isinstance(module, nn.modules.conv._ConvTransposeNd):
                options = (module.stride, module.padding, module.output_padding, module.groups)
                options += (module.dilation,)
            else:
                options = (module.stride, module.padding, module.dilation, module.groups)
            conv = graph.call_function(function, (source, weight, None, *options))
            spatial = len(module.kernel_size)
            shaped = graph.call_method("view", (bias, -1, *([1] * spatial)))
            added = graph.call_function(operator.add, (conv, shaped))
        node.replace_all_uses_with(added)
        graph.erase_node(node)
        split.append((str(node.target), source))
    graph_module.recompile()
    return split


def guards(path_expression: str) -> list[str]:
    """What the candidate checks of a split convolution (``self.conv``) on every call: it still
    has a bias, and no hook was added to it since."""
    return [
        f"{path_expression}.bias is not None",
        f"not {path_expression}._forward_hooks",
        f"not {path_expression}._forward_pre_hooks",
    ]
