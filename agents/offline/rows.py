"""C++ of a row kernel: a group with a softmax or log-softmax over the last dimension.

Per row of the group's iteration shape (``rows x cols``, split at the last dimension): the ops
before the reduction give each element's value (``<name>_pre``), the row's maximum and sum of
exponentials are reduced, and the ops after it (``<name>_post``, handed the reduced value) give
the outputs. On CUDA one block takes a row at a time: a single pass reads the row and keeps a
running maximum and rescaled sum (the online softmax), warps and then the block merge those, and
a second pass writes; a row of up to ``kRowCache`` floats stays in shared memory between the
passes, so it is read once. On the CPU each thread takes whole rows: the values into a buffer,
then the maximum, the sum (in double), and the outputs, as ATen does.

Values are as ATen's: a NaN in a row makes the row NaN, a +inf makes it NaN, and a row of -inf
is NaN; a -inf among finite values is 0 (softmax) or -inf (log-softmax).
"""

from __future__ import annotations

from agents.offline.cxx_common import element_type, pointer_params
from agents.offline.kernel import ROW_VALUE, FusedKernel

ROW_HELPERS = r"""
namespace kp {

// A row's running maximum m and sum s of exp(x - m).
struct RowStats {
  float m;
  float s;
};

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

// ATen's result for a row holding +inf is NaN everywhere (exp(inf - inf) enters its sum).
KP_INLINE RowStats finished(RowStats st) {
  if (st.m == INFINITY) st.s = NAN;
  return st;
}

}  // namespace kp
"""

CUDA_ROW_HELPERS = r"""
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
"""


def row_functions(kernel: FusedKernel) -> str:
    """``<name>_pre`` (an element's value before the reduction) and ``<name>_post`` (the
    outputs, given the reduced value); the body before the reduction is in both, and the
    compiler drops what each does not use."""
    assert kernel.row is not None
    index = [name for name, _ in kernel.body].index(kernel.row.value)
    params = [f"const float a{k}" for k in range(len(kernel.inputs))]
    params += [f"const float s{k}" for k in range(len(kernel.scalars))]
    outputs = [f"float& o{j}" for j in range(len(kernel.outputs))]
    pre = [
        "template <typename scalar_t>",
        f"KP_INLINE float {kernel.name}_pre({', '.join(params)}) {{",
        *[f"  const float {name} = {text};" for name, text in kernel.body[:index]],
        f"  return {kernel.row.source};",
        "}",
    ]
    post = [
        "template <typename scalar_t>",
        f"KP_INLINE void {kernel.name}_post("
        f"{', '.join([*params, f'const float {ROW_VALUE}', *outputs])}) {{",
        *[f"  const float {name} = {text};" for name, text in kernel.body],
        *[f"  o{j} = {item.value};" for j, item in enumerate(kernel.outputs)],
        "}",
    ]
    return "\n".join(pre + [""] + post)


def cuda_row_kernel(kernel: FusedKernel) -> str:
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
        "  __shared__ kp::RowStats kp_partial[32];",
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
        "    kp::RowStats st = kp::empty_stats();",
        columns,
        *loads,
        "#pragma unroll",
        "      for (int i = 0; i < VEC; ++i) {",
        f"        const float x = {pre};",
        "        if (CACHED) kp_cache[col + i] = x;",
        "        kp::add_value(st, x);",
        "      }",
        "    }",
        "    st = kp::block_stats(st, kp_partial);",
        *_row_constant(kernel, "    "),
        columns,
        *loads,
        *[
            f"      kp::Vec<{element_type(item)}, VEC> y{j};"
            for j, item in enumerate(kernel.outputs)
        ],
        "#pragma unroll",
        "      for (int i = 0; i < VEC; ++i) {",
        f"        const float x = CACHED ? kp_cache[col + i] : {pre};",
        f"        float {', '.join(outputs)};",
        f"        {kernel.name}_post<scalar_t>("
        f"{', '.join([*lanes, *scalars, _row_value(kernel), *outputs])});",
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
        "    __syncthreads();  // kp_partial and kp_cache are the next row's",
        "  }",
        "}",
    ]
    return "\n".join(lines)


def cuda_row_launch(kernel: FusedKernel) -> list[str]:
    name = kernel.name
    args = ", ".join([*_dense_args(kernel, row_strides=True), "rows", "cols"])
    vector_terms = ["cols % kVec == 0"]
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            vector_terms.append(f"kp::aligned(dense[{k}].data_ptr())")
            vector_terms.append(f"rows_plan.row_strides[{k}] % kVec == 0")
    vector_terms += [f"kp::aligned(out{j}.data_ptr())" for j in range(len(kernel.outputs))]
    vectorize = "false" if kernel.has_bool else " && ".join(vector_terms)
    launch = "<<<blocks, threads, shared, stream>>>"
    return [
        "const c10::cuda::CUDAGuard guard(in0.device());",
        "const cudaStream_t stream = at::cuda::getCurrentCUDAStream();",
        *_dense_plan(kernel),
        "constexpr int kVec = 16 / sizeof(scalar_t);",
        f"const bool vectorize = {vectorize};",
        "const int threads = kp::row_threads(vectorize ? cols / kVec : cols);",
        "const int64_t blocks = kp::row_blocks(rows, threads);",
        "const bool cached = cols <= kp::kRowCache;",
        "const size_t shared = cached ? static_cast<size_t>(cols) * sizeof(float) : 0;",
        f"if (vectorize && cached) {{ {name}_rows<scalar_t, kVec, true>{launch}({args}); }}",
        f"else if (vectorize) {{ {name}_rows<scalar_t, kVec, false>{launch}({args}); }}",
        f"else if (cached) {{ {name}_rows<scalar_t, 1, true>{launch}({args}); }}",
        f"else {{ {name}_rows<scalar_t, 1, false>{launch}({args}); }}",
        "C10_CUDA_KERNEL_LAUNCH_CHECK();",
    ]


def cpu_row_kernel(kernel: FusedKernel) -> str:
    count = len(kernel.inputs)
    scalars = [f"s{k}" for k in range(len(kernel.scalars))]
    outputs = [f"o{j}" for j in range(len(kernel.outputs))]
    loads = [
        f"kp::load(in{k}[r{k} + j])" if item.contiguous_columns else f"b{k}"
        for k, item in enumerate(kernel.inputs)
    ]
    pre = f"{kernel.name}_pre<scalar_t>({', '.join([*loads, *scalars])})"
    lines = [
        "template <typename scalar_t>",
        f"void {kernel.name}_rows({', '.join([*pointer_params(kernel), 'const kp::Plan& plan'])}) {{",
        "  const int64_t rows = plan.rows;",
        "  const int64_t cols = plan.cols;",
        "#pragma omp parallel num_threads(kp::threads_for(rows * cols))",
        "  {",
        "    std::vector<float> cache(static_cast<size_t>(cols));",
        "#pragma omp for schedule(static)",
        "    for (int64_t r = 0; r < rows; ++r) {",
        *[
            f"      const int64_t r{k} = kp::row_in_run(r, plan.row_divs[{k}], "
            f"plan.row_mods[{k}]) * plan.row_strides[{k}];"
            for k in range(count)
        ],
        *[
            f"      const float b{k} = kp::load(in{k}[r{k}]);"
            for k, item in enumerate(kernel.inputs)
            if not item.contiguous_columns
        ],
        "      float m = -INFINITY;",
        "      for (int64_t j = 0; j < cols; ++j) {",
        f"        cache[j] = {pre};",
        "        m = kp::maximum(m, cache[j]);",
        "      }",
        "      double sum = 0.0;",
        "      for (int64_t j = 0; j < cols; ++j) sum += kp::exp(cache[j] - m);",
        "      const kp::RowStats st = kp::finished(kp::RowStats{m, static_cast<float>(sum)});",
        *_row_constant(kernel, "      "),
        "      for (int64_t j = 0; j < cols; ++j) {",
        "        const float x = cache[j];",
        f"        float {', '.join(outputs)};",
        f"        {kernel.name}_post<scalar_t>("
        f"{', '.join([*loads, *scalars, _row_value(kernel), *outputs])});",
        *[
            f"        out{j}[r * cols + j] = kp::store<{element_type(item)}>(o{j});"
            for j, item in enumerate(kernel.outputs)
        ],
        "      }",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join(lines)


def cpu_row_launch(kernel: FusedKernel) -> list[str]:
    return [
        *_dense_plan(kernel),
        f"{kernel.name}_rows<scalar_t>({', '.join(_dense_args(kernel))}, rows_plan);",
    ]


def _vector_loads(kernel: FusedKernel) -> tuple[list[str], list[str]]:
    """The CUDA kernel's loads of a vector of columns at ``col``, and each lane's values."""
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


def _row_constant(kernel: FusedKernel, indent: str) -> list[str]:
    assert kernel.row is not None
    if kernel.row.kind == "softmax":
        return [f"{indent}const float row_scale = st.s;"]
    return [f"{indent}const float row_scale = kp::log(st.s);"]


def _row_value(kernel: FusedKernel) -> str:
    """The reduction's value for the element ``x`` of a row with stats ``st``."""
    assert kernel.row is not None
    if kernel.row.kind == "softmax":
        return "kp::exp(x - st.m) / row_scale"
    return "x - st.m - row_scale"


def _dense_plan(kernel: FusedKernel) -> list[str]:
    """The wrapper's plan, or where an input's strides cannot be read a row at a time (a
    transposed view), the plan of dense copies."""
    columns = ", ".join("true" if item.contiguous_columns else "false" for item in kernel.inputs)
    return [
        "std::vector<at::Tensor> dense = ins;",
        "kp::Plan rows_plan = plan;",
        "if (!rows_plan.fast) {",
        "  for (at::Tensor& tensor : dense) tensor = tensor.contiguous();",
        f"  rows_plan = kp::plan_fast(dense, {{{columns}}}, sizes, {{{kernel.split}}});",
        "}",
        f'TORCH_CHECK(rows_plan.fast, "{kernel.name}: inputs that cannot be read a row at a time");',
        "const int64_t rows = rows_plan.rows;",
        "const int64_t cols = rows_plan.cols;",
    ]


def _dense_args(kernel: FusedKernel, row_strides: bool = False) -> list[str]:
    args = []
    for k, item in enumerate(kernel.inputs):
        args.append(f"dense[{k}].data_ptr<{element_type(item)}>()")
        if row_strides:
            args += [
                f"rows_plan.row_strides[{k}]",
                f"rows_plan.row_divs[{k}]",
                f"rows_plan.row_mods[{k}]",
            ]
    args += [f"s{k}" for k in range(len(kernel.scalars))]
    args += [f"out{j}.data_ptr<{element_type(item)}>()" for j, item in enumerate(kernel.outputs)]
    return args
