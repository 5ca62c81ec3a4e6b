"""Which convolutions the candidate runs channels-last, and which fused kernels then iterate in
that memory order.

On a GPU, cuDNN's convolutions work in NHWC: given an NCHW input, a convolution converts it
(and often its output) with kernels of its own, which take as long as the fused epilogue after
it. torch.compile makes the input channels-last once and keeps the convolution's output so
(bench/BENCHMARKS.md, section 22). The candidate does the same: the input of each such
convolution goes through the extension's ``kp_channels_last`` (a tiled transpose), the
convolution returns a channels-last tensor, and every fused kernel reading it iterates over
the dimensions in memory order (``N, H, W, C``), where a per-channel ``[C, 1, 1]`` operand is
a row of ``C`` contiguous values and the conv's output one contiguous run: the fast path at
full memory bandwidth. The kernels' outputs are channels-last too; values are unchanged.

A convolution goes channels-last only where every fused kernel reading it can iterate in
memory order: each of that kernel's full-size inputs is channels-last. Grouped convolutions
stay as they are (cuDNN is slower on them in NHWC, and torch.compile leaves them too).

Only 16-bit problems, for now. In float32, cuDNN computes a convolution in TF32 by default
(``torch.backends.cudnn.allow_tf32``), and another layout is another algorithm with other
roundings: on the H200, 3 of 5 KernelBench convolution problems made channels-last differed
from their (TF32) reference by more than the float32 tolerance the harness holds them to
(section 22). A float32 convolution keeps its layout, and its values, until the harness
measures the reference's own TF32 error.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import Node

from agents.offline.grouping import iteration_shape

# The devices whose candidates get channels-last convolutions (measured on cuda only), and
# the dtypes (see above).
CHANNELS_LAST_DEVICES = {"cuda"}
CHANNELS_LAST_DTYPES = {torch.float16, torch.bfloat16}
# Dimension order of a channels-last tensor, by rank: N, spatial..., C.
MEMORY_ORDER = {4: (0, 2, 3, 1), 5: (0, 2, 3, 4, 1)}
CONV_MODULES = (nn.Conv2d, nn.Conv3d, nn.ConvTranspose2d, nn.ConvTranspose3d)
CONV_FUNCTIONS = (F.conv2d, F.conv3d, F.conv_transpose2d, F.conv_transpose3d)
HELPER = "kp_channels_last"  # the extension's function the convolution's input goes through


@dataclass(frozen=True)
class Layouts:
    """What runs channels-last: the convolutions whose input is converted, and each fused
    group's dimension order (absent: the logical order)."""

    convs: frozenset[Node]
    orders: dict[tuple[Node, ...], tuple[int, ...]]

    @classmethod
    def none(cls) -> Layouts:
        return cls(frozenset(), {})


def plan_layouts(
    groups: list[list[Node]], reference: nn.Module, device: str, dtype: torch.dtype
) -> Layouts:
    if device not in CHANNELS_LAST_DEVICES or dtype not in CHANNELS_LAST_DTYPES:
        return Layouts.none()
    convs = {node for group in groups for node in _inputs(group) if _plain_conv(node, reference)}
    while True:
        orders = _group_orders(groups, convs)
        readers = {node: [g for g in groups if node in _inputs(g)] for node in convs}
        kept = {node for node in convs if all(tuple(group) in orders for group in readers[node])}
        if kept == convs:
            return Layouts(frozenset(convs), orders)
        convs = kept


def _group_orders(
    groups: list[list[Node]], convs: set[Node]
) -> dict[tuple[Node, ...], tuple[int, ...]]:
    """Groups (in graph order) whose full-size inputs are all channels-last: a channels-last
    convolution's output or an earlier such group's."""
    channels_last: set[Node] = set(convs)
    orders = {}
    for group in groups:
        shape = tuple(iteration_shape(group))
        order = MEMORY_ORDER.get(len(shape))
        inputs = _inputs(group)
        full = [node for node in inputs if _shape(node) == shape]
        if order is None or not full or not all(node in channels_last for node in full):
            continue
        if not all(_keeps_order(_shape(node), order) for node in inputs if node not in full):
            continue  # a [C, H, W] operand would be read across its rows in memory order
        orders[tuple(group)] = order
        channels_last |= set(group)
    return orders


def _keeps_order(shape: tuple[int, ...], order: tuple[int, ...]) -> bool:
    """Whether a broadcast operand's dimensions of size over 1 come in the same order in
    ``order`` as in its own layout: then it is read in memory order too."""
    padded = (1,) * (len(order) - len(shape)) + shape
    indexed = [d for d in order if padded[d] != 1]
    return indexed == sorted(indexed)


def _inputs(group: list[Node]) -> list[Node]:
    inside = set(group)
    found = {
        value: None
        for node in group
        for value in node.all_input_nodes
        if value not in inside and "tensor_meta" in value.meta
    }
    return list(found)


def _shape(node: Node) -> tuple[int, ...]:
    return tuple(node.meta["tensor_meta"].shape)


def _plain_conv(node: Node, reference: nn.Module) -> bool:
    """A convolution of one group over a 4-d or 5-d floating-point input."""
    if node.op == "call_module":
        module = reference.get_submodule(str(node.target))
        if not isinstance(module, CONV_MODULES) or module.groups != 1:
            return False
    elif node.op == "call_function":
        # groups: the 7th argument of either form (agents.offline.conv_bias writes it so)
        groups = node.args[6] if len(node.args) > 6 else node.kwargs.get("groups", 1)
        if node.target not in CONV_FUNCTIONS or groups != 1:
            return False
    else:
        return False
    source = node.args[0] if node.args else None
    if not isinstance(source, Node) or "tensor_meta" not in source.meta:
        return False
    meta = node.meta["tensor_meta"]
    return (
        len(meta.shape) in MEMORY_ORDER
        and len(source.meta["tensor_meta"].shape) == len(meta.shape)
        and meta.dtype.is_floating_point
    )


SIGNATURE = f"at::Tensor {HELPER}(const at::Tensor& x)"

# The CPU's: ATen's own copy (channels-last convolutions are not chosen on cpu yet; tests use it).
CPU_SOURCE = f"""
{SIGNATURE} {{
  if (x.dim() == 4) return x.contiguous(at::MemoryFormat::ChannelsLast);
  if (x.dim() == 5) return x.contiguous(at::MemoryFormat::ChannelsLast3d);
  return x;
}}
"""

# CUDA's: per sample, a [C, S] -> [S, C] transpose through shared memory in 32 x 32 tiles (S:
# the spatial size), reading and writing whole 128-byte lines; ATen's strided copy took twice
# as long on the H200 (section 22). Other cases (already channels-last, a strided input, other
# dtypes) take ATen's copy.
CUDA_SOURCE = f"""
namespace kp {{

template <typename scalar_t>
__global__ void channels_last_tiles(const scalar_t* __restrict__ in, scalar_t* __restrict__ out,
                                    const int64_t channels, const int64_t spatial) {{
  __shared__ scalar_t tile[32][33];
  const int64_t sample = blockIdx.z;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int64_t c0 = static_cast<int64_t>(blockIdx.y) * 32;
  const scalar_t* src = in + sample * channels * spatial;
  scalar_t* dst = out + sample * channels * spatial;
  for (int i = threadIdx.y; i < 32; i += 8) {{
    const int64_t c = c0 + i, s = s0 + threadIdx.x;
    if (c < channels && s < spatial) tile[i][threadIdx.x] = src[c * spatial + s];
  }}
  __syncthreads();
  for (int i = threadIdx.y; i < 32; i += 8) {{
    const int64_t s = s0 + i, c = c0 + threadIdx.x;
    if (c < channels && s < spatial) dst[s * channels + c] = tile[threadIdx.x][i];
  }}
}}

}}  // namespace kp

{SIGNATURE} {{
  if (x.dim() != 4 && x.dim() != 5) return x;
  const at::MemoryFormat format =
      x.dim() == 4 ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::ChannelsLast3d;
  // the dispatch's: float, double and the two 16-bit types (not the 8-bit ones)
  const bool tiled_dtype = at::isFloatingType(x.scalar_type()) && x.element_size() >= 2;
  if (!x.is_cuda() || !tiled_dtype || !x.is_contiguous() || x.is_contiguous(format) ||
      x.numel() == 0) {{
    return x.contiguous(format);
  }}
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(format));
  const int64_t samples = x.size(0), channels = x.size(1);
  const int64_t spatial = x.numel() / (samples * channels);
  TORCH_CHECK((channels + 31) / 32 <= 65535, "{HELPER}: ", channels, " channels");
  const c10::cuda::CUDAGuard guard(x.device());
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16,
                                  x.scalar_type(), "{HELPER}", [&] {{
    for (int64_t first = 0; first < samples; first += 65535) {{
      const int64_t count = std::min<int64_t>(65535, samples - first);
      const dim3 grid(static_cast<unsigned>((spatial + 31) / 32),
                      static_cast<unsigned>((channels + 31) / 32), static_cast<unsigned>(count));
      kp::channels_last_tiles<scalar_t><<<grid, dim3(32, 8), 0, stream>>>(
          x.data_ptr<scalar_t>() + first * channels * spatial,
          out.data_ptr<scalar_t>() + first * channels * spatial, channels, spatial);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }}
  }});
  return out;
}}
"""
