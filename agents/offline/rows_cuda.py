"""The CUDA row kernel (``agents.offline.rows``).

A row is taken by one block, or split among the blocks of a thread block cluster (sm_90 on):
each block reads its columns once, keeping a running maximum and rescaled sum (the online
softmax); warps, then the block, then the cluster (through distributed shared memory) merge
those, and a second pass writes the outputs. Where the block's columns fit in shared memory
(up to what a block may opt in to: 227 KiB on an H100, so a cluster of 8 keeps rows of 450
thousand floats), the second pass reads them from there and the row crosses memory once each
way; otherwise it reads the row again.
"""

from __future__ import annotations

from agents.offline.cxx_common import element_type, pointer_params
from agents.offline.kernel import FusedKernel
from agents.offline.rows import dense_args, dense_plan, row_constant, row_value

CUDA_ROW_HELPERS = r"""
#include <cooperative_groups.h>

namespace kp {

constexpr int kMaxParts = 8;  // blocks a row may be split among: a portable cluster
constexpr int64_t kSharedMargin = 1024;  // bytes of a block's shared memory left to kp_partial

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int row_threads(int64_t vectors) {
  int threads = 32;
  while (threads < 1024 && threads < vectors) threads *= 2;
  return threads;
}

// How a launch covers rows x cols: `parts` blocks a row (a cluster where over 1), `chunk`
// columns each, kept in shared memory or (`cached` false) read again by the second pass.
struct RowLaunch {
  int parts = 1;
  int64_t chunk = 1;
  bool cached = false;
  int threads = 32;
  int64_t blocks = 1;
  size_t shared = 0;
};

inline RowLaunch plan_rows(int64_t rows, int64_t cols, int vec) {
  const cudaDeviceProp* props = at::cuda::getCurrentDeviceProperties();
  const int64_t room = static_cast<int64_t>(props->sharedMemPerBlockOptin) - kSharedMargin;
  const int64_t capacity = room / static_cast<int64_t>(sizeof(float));
  int parts = 1;
  while (parts < kMaxParts && ceil_div(cols, parts) > capacity) parts *= 2;
  const int64_t chunk = ceil_div(ceil_div(cols, parts), vec) * vec;
  RowLaunch how;
  if (chunk <= capacity && (parts == 1 || props->major >= 9)) {
    how.parts = parts;
    how.chunk = chunk;
    how.cached = true;
    how.shared = static_cast<size_t>(chunk) * sizeof(float);
  } else {
    how.chunk = cols;
  }
  how.threads = row_threads(ceil_div(how.chunk, vec));
  // Blocks that keep their rows in shared memory take one row each (a grid of resident blocks
  // looping over rows would leave whole clusters waiting for a place, each with its rows);
  // blocks that stream take rows in turn, as many blocks as fit at once.
  const int64_t resident = props->multiProcessorCount * std::max(1, 2048 / how.threads);
  how.blocks = std::max<int64_t>(1, how.cached ? rows : std::min(rows, resident)) * how.parts;
  return how;
}

// Launch the kernel `how` needs, with its shared memory opted in and its cluster set.
template <typename... Params, typename... Args>
void launch_rows(const RowLaunch& how, cudaStream_t stream, void (*streamed)(Params...),
                 void (*cached)(Params...), void (*clustered)(Params...), Args... args) {
  void (*kernel)(Params...) = how.parts > 1 ? clustered : (how.cached ? cached : streamed);
  if (how.shared > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(how.shared)));
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(how.blocks));
  config.blockDim = dim3(static_cast<unsigned>(how.threads));
  config.dynamicSmemBytes = how.shared;
  config.stream = stream;
  cudaLaunchAttribute cluster[1];
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = static_cast<unsigned>(how.parts);
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = how.parts > 1 ? 1 : 0;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args...));
}

__device__ __forceinline__ RowStats warp_stats(RowStats st) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    RowStats other;
    other.m = __shfl_xor_sync(0xffffffffu, st.m, offset);
    other.s = __shfl_xor_sync(0xffffffffu, st.s, offset);
    st = merge(st, other);
  }
  return st;
}

// The whole block's stats, in every thread (blockDim.x a multiple of 32, at most 1024).
__device__ __forceinline__ RowStats block_stats(RowStats st, RowStats* partial) {
  st = warp_stats(st);
  const int lane = threadIdx.x % 32;
  if (lane == 0) partial[threadIdx.x / 32] = st;
  __syncthreads();
  st = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : empty_stats();
  return finished(warp_stats(st));
}

}  // namespace kp

// The whole cluster's stats, from every block's partial[32]; clusters exist from sm_90 on, and
// plan_rows splits no row on older devices.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
namespace kp {
__device__ __forceinline__ RowStats cluster_stats(RowStats st, RowStats* partial) {
  __trap();
  return st;
}
__device__ __forceinline__ void cluster_sync() { __trap(); }
}  // namespace kp
#else
namespace kp {
__device__ __forceinline__ RowStats cluster_stats(RowStats st, RowStats* partial) {
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  if (threadIdx.x == 0) partial[32] = st;
  cluster.sync();
  RowStats all = empty_stats();
  for (unsigned rank = 0; rank < cluster.num_blocks(); ++rank) {
    all = merge(all, cluster.map_shared_rank(partial, rank)[32]);
  }
  return finished(all);
}
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }
}  // namespace kp
#endif
"""


def cuda_row_kernel(kernel: FusedKernel) -> str:
    params = [*pointer_params(kernel, row_strides=True)]
    params += ["const int64_t rows", "const int64_t cols", "const int64_t chunk", "const int parts"]
    loads, lanes = _vector_loads(kernel)
    scalars = [f"s{k}" for k in range(len(kernel.scalars))]
    outputs = [f"o{j}" for j in range(len(kernel.outputs))]
    pre = f"{kernel.name}_pre<scalar_t>({', '.join([*lanes, *scalars])})"
    columns = [
        "#pragma unroll 4",
        "    for (int64_t col = begin + static_cast<int64_t>(threadIdx.x) * VEC; col < end;"
        " col += static_cast<int64_t>(blockDim.x) * VEC) {",
    ]
    lines = [
        "template <typename scalar_t, int VEC, bool CACHED, bool CLUSTERED>",
        f"__global__ void {kernel.name}_rows({', '.join(params)}) {{",
        "  extern __shared__ float kp_cache[];",
        "  __shared__ kp::RowStats kp_partial[33];  // a stats per warp, then the block's",
        "  const int64_t begin = CLUSTERED ? (blockIdx.x % parts) * chunk : 0;",
        "  const int64_t end = CLUSTERED && begin + chunk < cols ? begin + chunk : cols;",
        "  for (int64_t row = blockIdx.x / parts; row < rows; row += gridDim.x / parts) {",
        *[
            f"    const int64_t r{k} = kp::row_in_run(row, rd{k}, rm{k}) * rs{k};"
            for k in range(len(kernel.inputs))
        ],
        *[
            f"    const float b{k} = kp::load(in{k}[r{k}]);"
            for k, item in enumerate(kernel.inputs)
            if not item.contiguous_columns
        ],
        "    kp::RowStats st = kp::empty_stats();",
        "    if (CACHED) {  // the loads first, free of the stats' chain: many in flight",
        *columns,
        *loads,
        "#pragma unroll",
        f"      for (int i = 0; i < VEC; ++i) kp_cache[col - begin + i] = {pre};",
        "    }",
        *columns,
        "      for (int i = 0; i < VEC; ++i) kp::add_value(st, kp_cache[col - begin + i]);",
        "    }",
        "    } else {",
        *columns,
        *loads,
        "#pragma unroll",
        f"      for (int i = 0; i < VEC; ++i) kp::add_value(st, {pre});",
        "    }",
        "    }",
        "    st = kp::block_stats(st, kp_partial);",
        "    if (CLUSTERED) st = kp::cluster_stats(st, kp_partial);",
        *row_constant(kernel, "    "),
        *columns,
        *loads,
        *[
            f"      kp::Vec<{element_type(item)}, VEC> y{j};"
            for j, item in enumerate(kernel.outputs)
        ],
        "#pragma unroll",
        "      for (int i = 0; i < VEC; ++i) {",
        f"        const float x = CACHED ? kp_cache[col - begin + i] : {pre};",
        f"        float {', '.join(outputs)};",
        f"        {kernel.name}_post<scalar_t>("
        f"{', '.join([*lanes, *scalars, row_value(kernel), *outputs])});",
        *[
            f"        y{j}.val[i] = kp::store<{element_type(item)}>(o{j});"
            for j, item in enumerate(kernel.outputs)
        ],
        "      }",
        *[
            f"      kp::store_vec<VEC>(out{j} + row * cols + col, y{j});"
            for j in range(len(kernel.outputs))
        ],
        "    }",
        "    // the stats and the cache are the next row's; the cluster's blocks read this one's",
        "    if (CLUSTERED) {",
        "      kp::cluster_sync();",
        "    } else {",
        "      __syncthreads();",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines)


def cuda_row_launch(kernel: FusedKernel) -> list[str]:
    args = ", ".join(
        [*dense_args(kernel, row_strides=True), "rows", "cols", "how.chunk", "how.parts"]
    )
    vector_terms = ["cols % kVec == 0"]
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            vector_terms.append(f"kp::aligned(dense[{k}].data_ptr())")
            vector_terms.append(f"rows_plan.row_strides[{k}] % kVec == 0")
    vector_terms += [f"kp::aligned(out{j}.data_ptr())" for j in range(len(kernel.outputs))]
    vectorize = "false" if kernel.has_bool else " && ".join(vector_terms)

    def launch(vec: str) -> str:
        kernels = ", ".join(
            f"{kernel.name}_rows<scalar_t, {vec}, {cached}, {clustered}>"
            for cached, clustered in (("false", "false"), ("true", "false"), ("true", "true"))
        )
        return f"kp::launch_rows(how, stream, {kernels}, {args});"

    return [
        "const c10::cuda::CUDAGuard guard(in0.device());",
        "const cudaStream_t stream = at::cuda::getCurrentCUDAStream();",
        *dense_plan(kernel),
        "constexpr int kVec = 16 / sizeof(scalar_t);",
        f"const bool vectorize = {vectorize};",
        "const kp::RowLaunch how = kp::plan_rows(rows, cols, vectorize ? kVec : 1);",
        "if (vectorize) {",
        f"  {launch('kVec')}",
        "} else {",
        f"  {launch('1')}",
        "}",
    ]


def _vector_loads(kernel: FusedKernel) -> tuple[list[str], list[str]]:
    """The loads of a vector of columns at ``col``, and each lane's values."""
    loads, lanes = [], []
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            loads.append(
                f"      const kp::Vec<{element_type(item)}, VEC> x{k} = "
                f"kp::load_vec<VEC>(in{k} + r{k} + col);"
            )
            lanes.append(f"kp::load(x{k}.val[i])")
        else:
            lanes.append(f"b{k}")
    return loads, lanes
