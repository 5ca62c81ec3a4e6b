"""The fused epilogue of a channels-last convolution (``agents.offline.conv_layout``), on the
tiles of ``agents.offline.cuda_tiles``: ``<name>_nhwc`` reads the convolution's NHWC output
and writes the chain's one output NCHW, the layout the module returns.

A thread keeps one channel for its four values, so each per-channel operand is read once per
thread (``in<k>[c * cs<k>]``, ``cs<k>`` its channel stride, 0 for a one-value operand) and
scalars are arguments; the chain runs as the NHWC side is read, and its results go through the
tile to the NCHW side. The host wrapper takes this kernel only where the convolution's output
is channels-last at run time and every other operand per-channel or one value
(``kp::nhwc_plan``); otherwise the kernel's usual paths run, which read any strides.
"""

from __future__ import annotations

from agents.offline.cuda_launch import kernel_args
from agents.offline.cuda_tiles import TILE_CHANNELS
from agents.offline.cxx_common import element_type, op_call, pointer_params
from agents.offline.kernel import FusedKernel

NHWC = 6  # the first launch variant of an epilogue's tiled kernel (cuda_launch: 0-5 are taken)
TILE_GRID = "<<<kp::tile_dims(l), l.threads, l.shared, l.stream>>>"

# The host's choice (after cuda_tiles.HOST).
HOST = r"""
namespace kp {

// Whether an epilogue can read tensors[source], a convolution's output of `sizes`, as NHWC
// tiles: where that output is channels-last (and not NCHW too: one channel, or one position)
// and every other input one value or one per channel. Then `l` is set for variant
// `first_variant` + the tile's, and the plan holds each input's channel stride (0: one value).
struct NhwcPlan {
  bool ok = false;
  std::vector<int64_t> channel_strides;
};

inline NhwcPlan nhwc_plan(const std::vector<at::Tensor>& tensors, size_t source,
                          at::IntArrayRef sizes, int first_variant, Launch& l) {
  NhwcPlan plan;
  const at::Tensor& y = tensors[source];
  if (sizes.size() != 4 || y.sizes() != sizes || !tiled_dtype(y.scalar_type()) ||
      y.is_contiguous() || !y.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    return plan;
  }
  const int64_t channels = sizes[1];
  for (size_t k = 0; k < tensors.size(); ++k) {
    const at::Tensor& t = tensors[k];
    int64_t stride = 0;
    if (k != source && t.numel() != 1) {  // [C, 1, 1] or [1, C, 1, 1]
      const int64_t lead = 4 - t.dim();
      if (lead < 0 || lead > 1) return plan;
      for (int64_t d = 0; d < t.dim(); ++d) {
        if (t.size(d) != (d + lead == 1 ? channels : 1)) return plan;
      }
      stride = t.stride(1 - lead);
    }
    plan.channel_strides.push_back(stride);
  }
  const int variant = tile_variant(channels);
  const int64_t positions = sizes[2] * sizes[3];
  if (!tile_grid(sizes[0], channels, positions, variant, l)) return plan;
  l.variant = first_variant + variant;
  l.rows = channels;
  l.cols = positions;
  plan.ok = true;
  return plan;
}

}  // namespace kp
"""


def epilogue(kernel: FusedKernel) -> str:
    """``<name>_nhwc``: the kernel's chain from its NHWC input ``nhwc_input`` (and per-channel
    or one-value operands) to its one output, written NCHW."""
    source = kernel.nhwc_input
    assert source is not None and len(kernel.outputs) == 1
    kind = element_type(kernel.inputs[source])
    params = [*pointer_params(kernel), *(f"const int64_t cs{k}" for k in range(len(kernel.inputs)))]
    params += ["const int64_t channels", "const int64_t positions"]
    operands = [f"x{k}[item]" if k == source else f"b{k}" for k in range(len(kernel.inputs))]
    lines = [
        "template <typename scalar_t, int TC>",
        "__global__ void __launch_bounds__(kp::kTileThreads)",
        f"    {kernel.name}_nhwc({', '.join(params)}) {{",
        "  constexpr int TP = kp::kTileElements / TC;",
        "  constexpr int kItems = kp::kTileElements / kp::kTileThreads;",
        "  constexpr int kStep = kp::kTileThreads / TC;  // positions between a thread's items",
        "  __shared__ float tile[TC][TP + 32 / TC];",
        "  const kp::TileAt t = kp::tile_at<TC>(channels, positions);",
        "  const int lane_c = threadIdx.x % TC;",
        "  const int first = threadIdx.x / TC;",
        "  // a channel past the last reads the last one's values, and its results are not stored",
        "  const int64_t c = t.c0 + (lane_c < t.rows ? lane_c : t.rows - 1);",
        *[
            f"  const float b{k} = kp::load(in{k}[c * cs{k}]);"
            for k in range(len(kernel.inputs))
            if k != source
        ],
        f"  const {kind}* src = in{source} + (t.image * positions + t.p0) * channels + c;",
        "  const int stride = static_cast<int>(channels);  // 32-bit within a tile (tile_grid)",
        f"  float x{source}[kItems];",
        "#pragma unroll",
        "  for (int item = 0; item < kItems; ++item) {",
        "    const int p = first + item * kStep;",
        f"    x{source}[item] = (t.cols == TP || p < t.cols) ? kp::load(src[p * stride]) : 0.0f;",
        "  }",
        "#pragma unroll",
        "  for (int item = 0; item < kItems; ++item) {",
        *op_call(kernel, operands, "    "),
        "    tile[lane_c][first + item * kStep] = o0;",
        "  }",
        "  __syncthreads();",
        "  kp::store_rows<TC>(tile, out0 + (t.image * channels + t.c0) * positions + t.p0, t,",
        "                     static_cast<int>(positions));",
        "}",
    ]
    return "\n".join(lines)


def launch_cases(kernel: FusedKernel) -> list[tuple[int, str]]:
    """The launcher's cases of ``<name>_nhwc``, one per tile shape (``kp::tile_variant``)."""
    strides = [f"l.row_strides[{k}]" for k in range(len(kernel.inputs))]
    args = kernel_args(kernel, False, [*strides, "l.rows", "l.cols"])
    return [
        (NHWC + variant, f"{kernel.name}_nhwc<scalar_t, {channels}>{TILE_GRID}({args})")
        for variant, channels in enumerate(TILE_CHANNELS)
    ]


def host_branch(kernel: FusedKernel, otherwise: list[str], finish: str) -> list[str]:
    """The wrapper's launch: the tiled kernel where ``kp::nhwc_plan`` allows, else
    ``otherwise`` (the kernel's usual paths)."""
    return [
        f"const kp::NhwcPlan nhwc = kp::nhwc_plan(ins, {kernel.nhwc_input}, sizes, {NHWC}, l);",
        "if (nhwc.ok) {",
        "  l.row_strides = nhwc.channel_strides.data();",
        f"  {finish}",
        "} else {",
        *[f"  {line}" for line in otherwise],
        "}",
    ]
