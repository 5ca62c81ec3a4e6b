"""Tiled transposes between NCHW and NHWC through shared memory, for channels-last
convolutions (``agents.offline.conv_layout``): the fixed CUDA text of the tiles, and
``kp_channels_last``, which makes a convolution's input NHWC. The fused epilogue that reads the
NHWC output and writes NCHW is generated per kernel on the same tiles
(``agents.offline.cuda_epilogue``).

A block takes a tile of ``kp::kTileElements`` (1024) values of one image: ``TC`` channels by
``1024 / TC`` positions (H x W flattened), ``TC`` one of 32, 16, 8, 4 (``kp::tile_variant``:
the largest that divides the channels, so KernelBench's 16-128 channels waste no lane). Its 256
threads read the tile along the side that is contiguous in the source and write it along the
side contiguous in the destination: the NHWC side a thread's channel at a time, the lanes of a
warp over ``TC`` channels of ``32 / TC`` positions (one run of memory where ``TC`` is all the
channels); the NCHW side a row of positions at a time (``kp::load_rows``, ``kp::store_rows``).
Four values a thread each way, all loaded before any is used. The tile is kept as float (exact
for the three dtypes taken), each row padded by ``32 / TC`` floats so that both sides'
accesses fall in 32 different banks.
"""

from __future__ import annotations

TILE_CHANNELS = (32, 16, 8, 4)  # a tile's channels, by kp::tile_variant
_CHANNELS = ", ".join(map(str, TILE_CHANNELS))

# In both files: the tile's geometry, which the host sizes the grid with.
SHARED = f"""
namespace kp {{

constexpr int kTileThreads = 256;
constexpr int kTileElements = 1024;
constexpr int kTileChannels[] = {{{_CHANNELS}}};
constexpr int kTileVariants = {len(TILE_CHANNELS)};

// The tile's channels for `channels` (an index into kTileChannels): the largest that divides
// them, else the smallest that holds them all, else the largest.
inline int tile_variant(int64_t channels) {{
  for (int v = 0; v < kTileVariants; ++v) {{
    if (channels % kTileChannels[v] == 0) return v;
  }}
  for (int v = kTileVariants - 1; v >= 0; --v) {{
    if (channels <= kTileChannels[v]) return v;
  }}
  return 0;
}}

// The grid of tiles over `images` of `channels` x `positions` into `l` (x: position tiles,
// y: channel tiles, z: images); false where one grid cannot hold them, or where offsets within
// a tile's rows would overflow the 32-bit arithmetic the kernels index them with.
inline bool tile_grid(int64_t images, int64_t channels, int64_t positions, int variant,
                      Launch& l) {{
  const int64_t tc = kTileChannels[variant];
  const int64_t tp = kTileElements / tc;
  const int64_t along = (positions + tp - 1) / tp;
  const int64_t across = (channels + tc - 1) / tc;
  const int64_t most = 2147483647;
  if (images < 1 || channels < 1 || positions < 1 || along > most || across > 65535 ||
      images > 65535 || tc * positions > most || tp * channels > most) {{
    return false;
  }}
  l.blocks = along;
  l.grid_y = across;
  l.grid_z = images;
  l.threads = kTileThreads;
  return true;
}}

}}  // namespace kp
"""

_DEVICE = r"""
namespace kp {

// A block's tile: its image, first channel and position, and how many of its TC channels
// (rows) and kTileElements / TC positions (cols) there are, fewer at the last tiles.
struct TileAt {
  int64_t image;
  int64_t c0;
  int64_t p0;
  int rows;
  int cols;
};

// The grid tile_grid sized, as a launch takes it.
inline dim3 tile_dims(const Launch& l) {
  return dim3(static_cast<unsigned>(l.blocks), static_cast<unsigned>(l.grid_y),
              static_cast<unsigned>(l.grid_z));
}

template <int TC>
__device__ __forceinline__ TileAt tile_at(int64_t channels, int64_t positions) {
  constexpr int TP = kTileElements / TC;
  TileAt t;
  t.image = blockIdx.z;
  t.c0 = static_cast<int64_t>(blockIdx.y) * TC;
  t.p0 = static_cast<int64_t>(blockIdx.x) * TP;
  t.rows = channels - t.c0 < TC ? static_cast<int>(channels - t.c0) : TC;
  t.cols = positions - t.p0 < TP ? static_cast<int>(positions - t.p0) : TP;
  return t;
}

// The NCHW side of a tile, row r (a channel) at src + r * stride, read along the positions:
// consecutive threads, consecutive positions. Offsets within the tile are 32-bit (tile_grid).
template <int TC, typename T>
__device__ __forceinline__ void load_rows(float (*tile)[kTileElements / TC + 32 / TC],
                                          const T* src, const TileAt& t, int stride) {
  constexpr int TP = kTileElements / TC;
  constexpr int kItems = kTileElements / kTileThreads;
  float v[kItems];
  if (t.rows == TC && t.cols == TP) {
#pragma unroll
    for (int item = 0; item < kItems; ++item) {
      const unsigned i = threadIdx.x + item * kTileThreads;
      v[item] = load(src[static_cast<int>(i / TP) * stride + static_cast<int>(i % TP)]);
    }
  } else {
#pragma unroll
    for (int item = 0; item < kItems; ++item) {
      const unsigned i = threadIdx.x + item * kTileThreads;
      const int row = i / TP, col = i % TP;
      v[item] = (row < t.rows && col < t.cols) ? load(src[row * stride + col]) : 0.0f;
    }
  }
#pragma unroll
  for (int item = 0; item < kItems; ++item) {
    const unsigned i = threadIdx.x + item * kTileThreads;
    tile[i / TP][i % TP] = v[item];
  }
}

template <int TC, typename T>
__device__ __forceinline__ void store_rows(const float (*tile)[kTileElements / TC + 32 / TC],
                                           T* dst, const TileAt& t, int stride) {
  constexpr int TP = kTileElements / TC;
  constexpr int kItems = kTileElements / kTileThreads;
  if (t.rows == TC && t.cols == TP) {
#pragma unroll
    for (int item = 0; item < kItems; ++item) {
      const unsigned i = threadIdx.x + item * kTileThreads;
      const int row = i / TP, col = i % TP;
      dst[row * stride + col] = store<T>(tile[row][col]);
    }
    return;
  }
#pragma unroll
  for (int item = 0; item < kItems; ++item) {
    const unsigned i = threadIdx.x + item * kTileThreads;
    const int row = i / TP, col = i % TP;
    if (row < t.rows && col < t.cols) dst[row * stride + col] = store<T>(tile[row][col]);
  }
}

// NCHW -> NHWC: a convolution's input made channels-last. A thread writes one channel (c) at
// kItems positions (a warp: TC channels of 32 / TC positions).
template <typename T, int TC>
__global__ void __launch_bounds__(kTileThreads)
    channels_last_tiles(const T* __restrict__ in, T* __restrict__ out, const int64_t channels,
                        const int64_t positions) {
  constexpr int TP = kTileElements / TC;
  constexpr int kItems = kTileElements / kTileThreads;
  constexpr int kStep = kTileThreads / TC;  // positions between a thread's items
  __shared__ float tile[TC][TP + 32 / TC];
  const TileAt t = tile_at<TC>(channels, positions);
  load_rows<TC>(tile, in + (t.image * channels + t.c0) * positions + t.p0, t,
                static_cast<int>(positions));
  __syncthreads();
  const int c = threadIdx.x % TC;
  const int first = threadIdx.x / TC;
  if (c >= t.rows) return;
  T* dst = out + (t.image * positions + t.p0) * channels + t.c0 + c;
  const int stride = static_cast<int>(channels);
#pragma unroll
  for (int item = 0; item < kItems; ++item) {
    const int p = first + item * kStep;
    if (t.cols == TP || p < t.cols) dst[p * stride] = store<T>(tile[c][p]);
  }
}

}  // namespace kp

template <typename T, int TC>
void kp_channels_last_tiles(const kp::Launch& l) {
  kp::channels_last_tiles<T, TC><<<kp::tile_dims(l), l.threads, 0, l.stream>>>(
      static_cast<const T*>(l.in[0]), static_cast<T*>(l.out[0]), l.rows, l.cols);
}

template <typename T>
void kp_channels_last_run(const kp::Launch& l) {
  switch (l.variant) {
TILE_CASES
  }
}

// The tile is float: the three dtypes it holds exactly.
int kp_channels_last_launch(const kp::Launch& l) {
  switch (l.dtype) {
    case kp::kF32: kp_channels_last_run<float>(l); break;
    case kp::kF16: kp_channels_last_run<c10::Half>(l); break;
    case kp::kBF16: kp_channels_last_run<c10::BFloat16>(l); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
"""
# kp_channels_last's launch for each tile shape (kp::tile_variant), the last the default.
DEVICE = _DEVICE.replace(
    "TILE_CASES",
    "\n".join(
        f"    {'default' if variant == len(TILE_CHANNELS) - 1 else f'case {variant}'}: "
        f"kp_channels_last_tiles<T, {channels}>(l); break;"
        for variant, channels in enumerate(TILE_CHANNELS)
    ),
)

HOST = r"""
int kp_channels_last_launch(const kp::Launch& l);

namespace kp {

// The dtypes a tile of floats holds exactly.
inline bool tiled_dtype(at::ScalarType dtype) {
  return dtype == at::ScalarType::Float || dtype == at::ScalarType::Half ||
         dtype == at::ScalarType::BFloat16;
}

}  // namespace kp

// x made channels-last for a convolution (cuDNN then runs it in NHWC): the tiled transpose for
// a contiguous 4-d float tensor, ATen's copy for other layouts and dtypes, x itself where it is
// channels-last already (or not 4-d: a convolution's unbatched input has no such layout). An
// empty tensor takes ATen's copy: a grid of no tiles is no launch.
at::Tensor kp_channels_last(const at::Tensor& x) {
  const at::MemoryFormat format = at::MemoryFormat::ChannelsLast;
  if (x.dim() != 4 || x.is_contiguous(format)) return x;
  if (x.numel() == 0) return x.contiguous(format);
  kp::Launch l;
  l.variant = kp::tile_variant(x.size(1));
  l.rows = x.size(1);
  l.cols = x.size(2) * x.size(3);
  if (!x.is_cuda() || !x.is_contiguous() || !kp::tiled_dtype(x.scalar_type()) ||
      !kp::tile_grid(x.size(0), l.rows, l.cols, l.variant, l)) {
    return x.contiguous(format);
  }
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(format));
  const c10::cuda::CUDAGuard guard(x.device());
  const void* const in_ptrs[] = {x.data_ptr()};
  void* const out_ptrs[] = {out.data_ptr()};
  l.dtype = kp::dtype_code(x.scalar_type());
  l.stream = at::cuda::getCurrentCUDAStream();
  l.in = in_ptrs;
  l.out = out_ptrs;
  C10_CUDA_CHECK(static_cast<cudaError_t>(kp_channels_last_launch(l)));
  return out;
}
"""
