"""Which 2-d convolutions a cuda candidate runs channels-last, with the epilogue writing NCHW.

On a GPU, cuDNN runs a 2-d convolution in NHWC. Given NCHW tensors, eager pays two conversions
of its own around it (``nchwToNhwc`` over the input, 327-640 µs, and ``nhwcToNchw`` back over
the output, 564-580 µs, on KernelBench level 2 at published sizes on an H200: each about one
pass, a read and a write, over its tensor; bench/BENCHMARKS.md section 22). torch.compile
makes the input channels-last once, keeps the convolution's output NHWC, and its epilogue
reads NHWC and writes the module's own NCHW layout. The candidate does the same: the input
goes through the extension's ``kp_channels_last`` (a tiled transpose), ``F.conv2d`` then
picks cuDNN's NHWC kernels (ATen's ``cudnn_conv_suggest_memory_format``: a channels-last input
is enough; cuDNN makes its own channels-last copy of the small weight on each call), and the
fused epilogue reads the NHWC output in tiles and writes NCHW (``agents.offline.cuda_tiles``).
Every output keeps its eager layout, so code after the module (a ``.view``) still works.

A convolution goes channels-last only where its epilogue can be one such tiled kernel:
- a 2-d convolution of one group over a 4-d input: ``F.conv2d`` or ``F.conv_transpose2d``,
  which is what a plain ``nn.Conv2d`` or ``nn.ConvTranspose2d`` with a bias becomes on cuda
  (``agents.offline.conv_bias``, whose guards fall back to the original forward where the conv
  gains a hook or loses its bias), or the same functions called by forward. A module conv
  without a bias stays a module call, in NCHW. 3-d convolutions stay NCHW: on KernelBench's 90
  cuDNN runs NCDHW in strict fp32, and channels-last 3-d in TF32 (section 22);
- read by one fused group only, of float32, float16 or bfloat16, with no row reduction and one
  output (no second reader of the convolution's output);
- whose other tensor operands are per-channel (``[C, 1, 1]`` or ``[1, C, 1, 1]``) or one value.
  A ``[C]`` operand broadcasts along the width, not the channels, so it is not one of them.
Anything else keeps today's NCHW convolution and kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Node
from torch.fx.passes.shape_prop import TensorMetadata

from agents.offline.cuda_tiles import TILE_CHANNELS
from agents.offline.grouping import group_outputs, iteration_shape
from agents.offline.ops import ROW_KINDS, PointwiseOp
from harness.judge.precision import reduced_settings

CHANNELS_LAST_DEVICES = {"cuda"}
CHANNELS_LAST_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CONV_FUNCTIONS = (F.conv2d, F.conv_transpose2d)
CONV_MODULES = (nn.Conv2d, nn.ConvTranspose2d)
HELPER = "kp_channels_last"  # the extension's function a convolution's input goes through


@dataclass(frozen=True)
class ChannelsLast:
    """The convolutions whose input is made channels-last, and the fused groups that read one
    of them NHWC (by the group's nodes: the convolution it reads)."""

    convs: frozenset[Node]
    epilogues: dict[tuple[Node, ...], Node]

    @classmethod
    def none(cls) -> ChannelsLast:
        return cls(frozenset(), {})


def plan_channels_last(
    groups: list[list[Node]], ops: dict[Node, PointwiseOp], device: str, dtype: torch.dtype
) -> ChannelsLast:
    if device not in CHANNELS_LAST_DEVICES or dtype not in CHANNELS_LAST_DTYPES:
        return ChannelsLast.none()
    epilogues = {}
    for group in groups:
        conv = _epilogue_source(group, ops, dtype)
        if conv is not None:
            epilogues[tuple(group)] = conv
    return ChannelsLast(frozenset(epilogues.values()), epilogues)


def _epilogue_source(
    group: list[Node], ops: dict[Node, PointwiseOp], dtype: torch.dtype
) -> Node | None:
    """The convolution whose NHWC output ``group`` can read in tiles, if there is one."""
    inside = set(group)
    outputs = group_outputs(group)
    if any(ops[node].kind in ROW_KINDS for node in group) or len(outputs) != 1:
        return None
    shape = tuple(iteration_shape(group))
    if len(shape) != 4 or _meta(outputs[0]).dtype != dtype or not _tiles_fit(shape):
        return None
    tensors = {
        value: None
        for node in group
        for value in ops[node].operands
        if isinstance(value, Node) and value not in inside and "tensor_meta" in value.meta
    }
    full = [value for value in tensors if tuple(_meta(value).shape) == shape]
    if len(full) != 1 or not _plain_conv(full[0], dtype):
        return None
    conv = full[0]
    if not all(user in inside or _reads_no_values(user) for user in conv.users):
        return None  # a second reader would need the convolution's NCHW output
    others = [value for value in tensors if value is not conv]
    if not all(_per_channel(tuple(_meta(value).shape), shape[1]) for value in others):
        return None
    if any(_meta(value).dtype != dtype for value in others):
        return None
    return conv


def _tiles_fit(shape: tuple[int, ...]) -> bool:
    """Whether one grid of tiles holds ``[N, C, H, W]`` at its traced sizes, as ``kp::tile_grid``
    decides at run time (where it does not, the epilogue's NHWC input would take the general
    kernel: slower than the NCHW path this replaces)."""
    images, channels, height, width = shape
    widest, most = max(TILE_CHANNELS), 2**31 - 1
    return images <= 65535 and widest * height * width <= most and 1024 * channels <= most


def _reads_no_values(node: Node) -> bool:
    """``y.device``, ``y.shape``, ``y.size()``...: the same for a channels-last ``y``
    (``torch.tensor(0.0, device=x.device)`` reads the convolution's device, KernelBench's 93)."""
    if node.op == "call_function" and node.target is getattr:
        return node.args[1:] in (("device",), ("dtype",), ("shape",), ("ndim",))
    return node.op == "call_method" and node.target in ("size", "dim")


def _per_channel(shape: tuple[int, ...], channels: int) -> bool:
    """One value, or one per channel of an ``[N, C, H, W]`` output."""
    padded = (1,) * (4 - len(shape)) + shape
    return math.prod(shape) == 1 or (len(shape) <= 4 and padded == (1, channels, 1, 1))


def _plain_conv(node: Node, dtype: torch.dtype) -> bool:
    """``F.conv2d`` or ``F.conv_transpose2d`` of one group over a 4-d input, in ``dtype``."""
    source = _converted_input(node, {}) if node.op == "call_function" else None
    return source is not None and _meta(source).dtype == _meta(node).dtype == dtype


def _converted_input(node: Node, modules: dict[str, nn.Module]) -> Node | None:
    """The input of a 2-d convolution of one group over a 4-d float tensor (the module or the
    function, its input given first), which cuDNN runs in NHWC; None for any other call."""
    if node.op == "call_module":
        layer = modules[str(node.target)]
        plain = type(layer) in CONV_MODULES and layer.groups == 1
    else:
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        plain = node.op == "call_function" and node.target in CONV_FUNCTIONS and groups == 1
    source = node.args[0] if node.args else None
    if not plain or not isinstance(source, Node) or "tensor_meta" not in node.meta:
        return None
    if "tensor_meta" not in source.meta or len(_meta(source).shape) != 4:
        return None
    return source if _meta(node).dtype in CHANNELS_LAST_DTYPES else None


def eager_conversion_bytes(node: Node, modules: dict[str, nn.Module], device: str) -> int:
    """What cuDNN's two conversions around a 2-d convolution move in eager on cuda: one pass
    (a read and a write) over the input, one over the output; 0 for any other call.

    Measured (section 22) on five KernelBench problems, all 2-d convolutions of one group in
    float32 under cuDNN's TF32 (PyTorch's default): ``nchwToNhwc`` 327-640 µs and
    ``nhwcToNchw`` 564-580 µs, about one pass over each tensor at the H200's copy speed. Counted
    there only: float16, bfloat16 and strict float32 are not measured (a strict-fp32 conv may
    run NCHW with no conversion, as 90's 3-d one does), and an input that is channels-last
    already is converted by no one. 3-d convolutions and grouped ones count none."""
    source = _converted_input(node, modules) if device.startswith("cuda") else None
    if source is None or _meta(node).dtype != torch.float32 or not _tf32_convolutions():
        return 0
    if _meta(source).memory_format == torch.channels_last:
        return 0
    return 2 * (_bytes(source) + _bytes(node))


def _tf32_convolutions() -> bool:
    """Whether cuDNN runs float32 convolutions in TF32 here (PyTorch's default)."""
    named = ("torch.backends.cudnn.conv.", "torch.backends.cudnn.allow_tf32")
    return any(setting.startswith(named) for setting in reduced_settings("cuda"))


def transpose_bytes(conv: Node) -> int:
    """What the candidate's own ``kp_channels_last`` moves for ``conv``'s input: one pass.
    Its output needs none: the epilogue reads NHWC and writes NCHW in its one pass."""
    source = conv.args[0]
    assert isinstance(source, Node)
    return 2 * _bytes(source)


def _bytes(node: Node) -> int:
    meta = _meta(node)
    return math.prod(meta.shape) * meta.dtype.itemsize


def _meta(node: Node) -> TensorMetadata:
    return node.meta["tensor_meta"]
