"""The CUDA row kernel (``agents.offline.rows``).

One block takes a row at a time (a grid of as many blocks as fit at once, looping over rows):
a first pass reads the row and keeps a running maximum and rescaled sum (the online softmax),
or a running sum (a row's sum, mean or 2-norm), warps and then the block merge those, and a
second pass writes the outputs. A row of up to
``kRowCache`` floats stays in shared memory between the passes, so it is read once; a longer
one is read again.

Measured on an H200 (bench/BENCHMARKS.md, section 23): at KernelBench's 4096 x 393216 it
takes 4.8 ms against eager's 6.2 and torch.compile's 4.7; kept rows were not measured with it.
Two attempts at keeping longer rows (shared memory opted in to, thread block clusters) were
slower than this at every width measured and are not here.
"""

from __future__ import annotations

from agents.offline import cuda_launch
from agents.offline.cuda_launch import SCALAR, VECTORIZED
from agents.offline.cxx_common import element_type, pointer_params
from agents.offline.kernel import FusedKernel
from agents.offline.rows import dense_plan, row_constant, row_term, row_value, sums

CUDA_ROW_HELPERS = r"""
namespace kp {

// The online softmax: a running maximum, and the sum rescaled when the maximum grows.
KP_INLINE RowStats empty_stats() { return RowStats{-INFINITY, 0.0f}; }

KP_INLINE void add_value(RowStats& st, float x) {
  if (x > st.m) {
    st.s = st.s * kp::exp(st.m - x) + 1.0f;
    st.m = x;
  } else {
    st.s += (x == st.m) ? 1.0f : kp::exp(x - st.m);  // -inf == -inf counts 1, as ATen's NaN
  }
}

KP_INLINE RowStats merge(RowStats a, RowStats b) {
  if (b.m > a.m) {
    const RowStats t = a;
    a = b;
    b = t;
  }
  const float scale = (a.m == b.m) ? 1.0f : kp::exp(b.m - a.m);
  return RowStats{a.m, a.s + b.s * scale};
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

// A row's sum: the same steps with a plain sum.
KP_INLINE RowSum empty_sum() { return RowSum{0.0f}; }

KP_INLINE void add_sum(RowSum& st, float x) { st.s += x; }

__device__ __forceinline__ RowSum warp_sum(RowSum st) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    st.s += __shfl_xor_sync(0xffffffffu, st.s, offset);
  }
  return st;
}

__device__ __forceinline__ RowSum block_sum(RowSum st, RowSum* partial) {
  st = warp_sum(st);
  const int lane = threadIdx.x % 32;
  if (lane == 0) partial[threadIdx.x / 32] = st;
  __syncthreads();
  st = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : empty_sum();
  return warp_sum(st);
}

}  // namespace kp
"""


# The host file's part: the launch's shape.
CUDA_ROW_HOST = r"""
namespace kp {

// Floats of a row kept in shared memory: 47 KiB, with the 256 bytes of kp_partial under the
// 48 KiB a block may have without asking.
constexpr int64_t kRowCache = 47 * 1024 / sizeof(float);

inline int row_threads(int64_t vectors) {
  int threads = 32;
  while (threads < 512 && threads < vectors) threads *= 2;
  return threads;
}

inline int64_t row_blocks(int64_t rows, int threads) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return std::max<int64_t>(1, std::min<int64_t>(rows, sms * (2048 / threads)));
}

}  // namespace kp
"""


def cuda_row_kernel(kernel: FusedKernel) -> str:
    if sums(kernel):
        stats, empty, add, block = "kp::RowSum", "kp::empty_sum()", "kp::add_sum", "kp::block_sum"
    else:
        stats, empty, add = "kp::RowStats", "kp::empty_stats()", "kp::add_value"
        block = "kp::block_stats"
    params = [*pointer_params(kernel, row_strides=True), "const int64_t rows", "const int64_t cols"]
    loads, lanes = _vector_loads(kernel)
    scalars = [f"s{k}" for k in range(len(kernel.scalars))]
    outputs = [f"o{j}" for j in range(len(kernel.outputs))]
    pre = f"{kernel.name}_pre<scalar_t>({', '.join([*lanes, *scalars])})"
    columns = (
        "    for (int64_t col = static_cast<int64_t>(threadIdx.x) * VEC; col < cols;"
        " col += static_cast<int64_t>(blockDim.x) * VEC) {"
    )
    lines = [
        "template <typename scalar_t, int VEC, bool CACHED>",
        f"__global__ void {kernel.name}_rows({', '.join(params)}) {{",
        "  extern __shared__ float kp_cache[];",
        f"  __shared__ {stats} kp_partial[32];",
        "  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {",
        *[
            f"    const int64_t r{k} = kp::row_in_run(row, rd{k}, rm{k}) * rs{k};"
            for k in range(len(kernel.inputs))
        ],
        *[
            f"    const float b{k} = kp::load(in{k}[r{k}]);"
            for k, item in enumerate(kernel.inputs)
            if not item.contiguous_columns
        ],
        f"    {stats} st = {empty};",
        columns,
        *loads,
        "#pragma unroll",
        "      for (int i = 0; i < VEC; ++i) {",
        f"        const float x = {pre};",
        "        if (CACHED) kp_cache[col + i] = x;",
        f"        {add}(st, {row_term(kernel, 'x')});",
        "      }",
        "    }",
        f"    st = {block}(st, kp_partial);",
        *row_constant(kernel, "    "),
        columns,
        *loads,
        *[
            f"      kp::Vec<{element_type(item)}, VEC> y{j};"
            for j, item in enumerate(kernel.outputs)
        ],
        "#pragma unroll",
        "      for (int i = 0; i < VEC; ++i) {",
        *([] if sums(kernel) else [f"        const float x = CACHED ? kp_cache[col + i] : {pre};"]),
        f"        float {', '.join(outputs)};",
        f"        {kernel.name}_post<scalar_t>("
        f"{', '.join([*lanes, *scalars, row_value(kernel), *outputs])});",
        *[
            f"        y{j}.val[i] = kp::store<{element_type(item)}>(o{j});"
            for j, item in enumerate(kernel.outputs)
        ],
        "      }",
        *[
            f"      kp::store_vec<VEC>(out{j}, (row * cols + col) / VEC, y{j});"
            for j in range(len(kernel.outputs))
        ],
        "    }",
        "    __syncthreads();  // kp_partial and kp_cache are the next row's",
        "  }",
        "}",
    ]
    return "\n".join(lines)


def cuda_row_launcher(kernel: FusedKernel) -> str:
    """The ``.cu`` side: variant 0-3 is (vectorized or not) x (row cached or not)."""
    args = cuda_launch.kernel_args(kernel, True, ["l.rows", "l.cols"])
    launch = cuda_launch.GRID
    variants: tuple[tuple[int, str, str], ...] = SCALAR if kernel.has_bool else VECTORIZED + SCALAR
    if sums(kernel):  # a sum keeps nothing of its first pass: the cached variants never run
        variants = tuple(variant for variant in variants if variant[2] == "false")
    calls = {
        variant: f"{kernel.name}_rows<scalar_t, {width}, {cached}>{launch}({args})"
        for variant, width, cached in variants
    }
    return cuda_launch.launcher(kernel, list(calls.items()), calls[SCALAR[-1][0]])


def cuda_row_host(kernel: FusedKernel) -> list[str]:
    """The wrapper's launch: the inputs as the kernel reads them, the block size, the cache."""
    vector_terms = ["cols % kVec == 0"]
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            vector_terms.append(f"kp::aligned(dense[{k}].data_ptr())")
            vector_terms.append(f"rows_plan.row_strides[{k}] % kVec == 0")
    vector_terms += [f"kp::aligned(out{j}.data_ptr())" for j in range(len(kernel.outputs))]
    vectorize = "false" if kernel.has_bool else " && ".join(vector_terms)
    return [
        *dense_plan(kernel),
        *cuda_launch.host_start(kernel, "dense"),
        "const int64_t kVec = kp::vector_width(dtype);",
        f"const bool vectorize = {vectorize};",
        "l.threads = kp::row_threads(vectorize ? cols / kVec : cols);",
        "l.blocks = kp::row_blocks(rows, l.threads);",
        # a sum's outputs take the reduced value alone: nothing of the first pass to keep
        f"const bool cached = {'false' if sums(kernel) else 'cols <= kp::kRowCache'};",
        "l.shared = cached ? static_cast<size_t>(cols) * sizeof(float) : 0;",
        "l.variant = (vectorize ? 0 : 2) + (cached ? 0 : 1);",
        *cuda_launch.host_rows("rows_plan"),
        "l.rows = rows;",
        "l.cols = cols;",
        cuda_launch.host_finish(kernel),
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
