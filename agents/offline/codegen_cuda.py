"""CUDA source for the GPU backend: a ``.cu`` file of kernels with no ATen header, and a host
file of wrappers (``agents.offline.cuda_launch`` says how they meet).

One ``__global__`` fast kernel per group, a grid-stride loop over 16-byte vectors (4 floats, 8
halves) when every row-read input is 16-byte aligned and rows hold whole vectors, with a scalar
tail; ``FLAT`` instantiations (one row) skip the row/column split. A second, general kernel
indexes inputs by broadcast strides. A group with a row reduction gets a row kernel instead
(``agents.offline.rows``, ``agents.offline.rows_cuda``). Launches go on the current stream and
are checked.
"""

from __future__ import annotations

from agents.offline import cuda_launch
from agents.offline.cuda_launch import (
    GENERAL,
    GRID,
    HOST_LAUNCH,
    LAUNCH,
    ROWWISE,
    SCALAR,
    VECTORIZED,
)
from agents.offline.cxx_common import (
    element_type,
    op_call,
    op_function,
    pointer_params,
    wrapper,
)
from agents.offline.cxx_helpers import ELEMENT_HELPERS, INDEX_HELPERS, PLAN_HELPERS
from agents.offline.kernel import FusedKernel
from agents.offline.rows import ROW_SPLIT, ROW_STATS, row_functions
from agents.offline.rows_cuda import (
    CUDA_ROW_HELPERS,
    CUDA_ROW_HOST,
    cuda_row_host,
    cuda_row_kernel,
    cuda_row_launcher,
)

CUDA_FLAGS = ["-O3"]

_HOST_PRELUDE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#define KP_INLINE inline
#define KP_HD
"""

_DEVICE_PRELUDE = r"""
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#define KP_INLINE __host__ __device__ __forceinline__
#define KP_HD __host__ __device__

namespace kp {

KP_INLINE float exp(float x) { return expf(x); }
KP_INLINE float expm1(float x) { return expm1f(x); }
KP_INLINE float log(float x) { return logf(x); }
KP_INLINE float log1p(float x) { return log1pf(x); }
KP_INLINE float tanh(float x) { return tanhf(x); }
KP_INLINE float erf(float x) { return erff(x); }
KP_INLINE float abs(float x) { return fabsf(x); }
KP_INLINE float sqrt(float x) { return sqrtf(x); }
KP_INLINE float sin(float x) { return sinf(x); }
KP_INLINE float cos(float x) { return cosf(x); }
KP_INLINE float pow(float x, float y) { return powf(x, y); }

// Vectors a thread of the fast kernel takes per pass. Measured on an H200 (bench/BENCHMARKS.md,
// section 24: python -m bench variants): 2 no faster than 1, 4 slower (0.84x).
constexpr int kUnroll = 1;

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T val[N];
};

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

// Vector number `vector` of `p`, indexed as vectors: nvcc then stores it in one instruction
// (a store at `p + offset` it may split into N, where it cannot tell the offset's alignment).
template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, int64_t vector, const Vec<T, N>& v) {
  reinterpret_cast<Vec<T, N>*>(p)[vector] = v;
}

}  // namespace kp
"""


def cuda_sources(kernels: list[FusedKernel]) -> tuple[str, str]:
    """(the host file: wrappers, the bindings' functions; the .cu file: kernels, launchers)."""
    rows = any(kernel.row is not None for kernel in kernels)
    host = [_HOST_PRELUDE, LAUNCH, INDEX_HELPERS, PLAN_HELPERS, HOST_LAUNCH]
    device = [_DEVICE_PRELUDE, LAUNCH, ELEMENT_HELPERS, INDEX_HELPERS]
    if rows:
        host += [ROW_SPLIT, CUDA_ROW_HOST]
        device += [ROW_STATS, CUDA_ROW_HELPERS]
    for kernel in kernels:
        host.append(cuda_launch.declaration(kernel))
        if kernel.row is not None:
            device += [row_functions(kernel), cuda_row_kernel(kernel), cuda_row_launcher(kernel)]
            host.append(wrapper(kernel, cuda_row_host(kernel), dispatch=False))
            continue
        device.append(op_function(kernel))
        if kernel.fast_path:
            device.append(_fast(kernel))
            if not kernel.has_bool:
                device.append(_rowwise(kernel))
        device += [_general(kernel), _launcher(kernel)]
        host.append(wrapper(kernel, _host(kernel), dispatch=False))
    return _joined(host), _joined(device)


def _joined(parts: list[str]) -> str:
    return "\n".join(part.strip("\n") + "\n" for part in parts)


def _fast(kernel: FusedKernel) -> str:
    params = pointer_params(kernel, row_strides=True)
    params += ["const int64_t numel", "const int64_t cols"]
    lines = [
        "template <typename scalar_t, int VEC, bool FLAT>",
        f"__global__ void {kernel.name}_fast({', '.join(params)}) {{",
        "  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;",
        "  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
        "  const int64_t vectors = numel / VEC;",
        # kUnroll vectors a thread per pass, a grid's width apart, their loads issued together
        # (the pointers are __restrict__): more bytes in flight per thread, where that helps.
        "  for (int64_t pass = first; pass < vectors; pass += step * kp::kUnroll) {",
        "#pragma unroll",
        "    for (int u = 0; u < kp::kUnroll; ++u) {",
        "      const int64_t v = pass + u * step;",
        "      if (v >= vectors) break;",
    ]
    body = [
        "    const int64_t base = v * VEC;",
        "    const int64_t row = FLAT ? 0 : kp::quotient(base, cols);",
        "    const int64_t col = FLAT ? base : base - row * cols;",
        *_row_offsets(kernel),
        *_vector(kernel),
    ]
    lines += [line if line.startswith("#") else f"  {line}" for line in body]
    tail_loads = [
        f"kp::load(in{k}[r{k} + col])" if item.contiguous_columns else f"kp::load(in{k}[r{k}])"
        for k, item in enumerate(kernel.inputs)
    ]
    lines += [
        "    }",
        "  }",
        "  for (int64_t i = vectors * VEC + first; i < numel; i += step) {",
        "    const int64_t row = FLAT ? 0 : kp::quotient(i, cols);",
        "    const int64_t col = FLAT ? i : i - row * cols;",
        *_row_offsets(kernel),
        *op_call(kernel, tail_loads, "    "),
        *[
            f"    out{j}[i] = kp::store<{element_type(item)}>(o{j});"
            for j, item in enumerate(kernel.outputs)
        ],
        "  }",
        "}",
    ]
    return "\n".join(lines)


def _rowwise(kernel: FusedKernel) -> str:
    """The fast path for long rows: a block takes a stretch of one row, a thread
    ``kp::kRowwiseItems`` vectors of it, a block's width apart, all loaded before any is
    computed. The row, and each operand's offset in it, is found once per thread; the
    grid-stride kernel finds them per vector, and took 1.2-1.7x Inductor's device time on conv
    epilogues (bench/BENCHMARKS.md, section 24)."""
    params = pointer_params(kernel, row_strides=True)
    params += ["const int64_t cols", "const int64_t across"]
    items = "kp::kRowwiseItems"
    vector_loads = [
        (k, element_type(item)) for k, item in enumerate(kernel.inputs) if item.contiguous_columns
    ]
    lines = [
        "template <typename scalar_t, int VEC>",
        f"__global__ void {kernel.name}_rowwise({', '.join(params)}) {{",
        "  constexpr bool FLAT = false;",
        "  const int64_t row = kp::quotient(blockIdx.x, across);",
        "  const int64_t stretch = blockIdx.x - row * across;",
        *_outdented(_row_offsets(kernel)),
        *_outdented(_row_values(kernel)),
        "  const int64_t vcols = cols / VEC;",
        f"  const int64_t first = stretch * {items} * blockDim.x + threadIdx.x;",
        *[f"  kp::Vec<{kind}, VEC> x{k}[{items}];" for k, kind in vector_loads],
        "#pragma unroll",
        f"  for (int item = 0; item < {items}; ++item) {{",
        "    const int64_t col = (first + static_cast<int64_t>(item) * blockDim.x) * VEC;",
        "    if (col >= cols) break;",
        *[f"    x{k}[item] = kp::load_vec<VEC>(in{k} + r{k} + col);" for k, _ in vector_loads],
        "  }",
        "#pragma unroll",
        f"  for (int item = 0; item < {items}; ++item) {{",
        "    const int64_t vcol = first + static_cast<int64_t>(item) * blockDim.x;",
        "    if (vcol >= vcols) break;",
        *_computed(kernel, "[item]", "row * vcols + vcol"),
        "  }",
        "}",
    ]
    return "\n".join(lines)


def _outdented(lines: list[str]) -> list[str]:
    """A loop body's lines (4 spaces in) at a function body's indentation."""
    return [line.removeprefix("  ") for line in lines]


def _row_values(kernel: FusedKernel) -> list[str]:
    """The one value per row of each operand read that way, at its row offset ``r<k>``."""
    return [
        f"    const float b{k} = kp::load(in{k}[r{k}]);"
        for k, item in enumerate(kernel.inputs)
        if not item.contiguous_columns
    ]


def _vector(kernel: FusedKernel) -> list[str]:
    """One vector's loads (at row offsets ``r<k>`` and column ``col``), ops and store (vector
    ``v`` of each output), indented for a loop's body."""
    body = _row_values(kernel)
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            body.append(
                f"    const kp::Vec<{element_type(item)}, VEC> x{k} = "
                f"kp::load_vec<VEC>(in{k} + r{k} + col);"
            )
    return body + _computed(kernel, "", "v")


def _computed(kernel: FusedKernel, which: str, vector: str) -> list[str]:
    """The ops over loaded vectors ``x<k><which>`` (and row values ``b<k>``), and their
    results stored as vector number ``vector`` of each output."""
    lane_loads = [
        f"kp::load(x{k}{which}.val[i])" if item.contiguous_columns else f"b{k}"
        for k, item in enumerate(kernel.inputs)
    ]
    body = [
        f"    kp::Vec<{element_type(item)}, VEC> y{j};" for j, item in enumerate(kernel.outputs)
    ]
    body += ["#pragma unroll", "    for (int i = 0; i < VEC; ++i) {"]
    body += op_call(kernel, lane_loads, "      ")
    body += [
        f"      y{j}.val[i] = kp::store<{element_type(item)}>(o{j});"
        for j, item in enumerate(kernel.outputs)
    ]
    body.append("    }")
    body += [f"    kp::store_vec<VEC>(out{j}, {vector}, y{j});" for j in range(len(kernel.outputs))]
    return body


def _row_offsets(kernel: FusedKernel) -> list[str]:
    """Where each input's row ``row`` starts (``kp::row_map``'s stride, divisor, modulus)."""
    return [
        f"    const int64_t r{k} = FLAT ? 0 : kp::row_in_run(row, rd{k}, rm{k}) * rs{k};"
        for k in range(len(kernel.inputs))
    ]


def _general(kernel: FusedKernel) -> str:
    count = len(kernel.inputs)
    params = [*pointer_params(kernel), f"const kp::Geometry<{count}> geo", "const int64_t numel"]
    lines = [
        "template <typename scalar_t>",
        f"__global__ void {kernel.name}_general({', '.join(params)}) {{",
        "  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;",
        "  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
        "  for (int64_t i = first; i < numel; i += step) {",
        f"    int64_t off[{count}];",
        "    geo.offsets(i, geo.ndim - 1, off);",
        *op_call(kernel, [f"kp::load(in{k}[off[{k}]])" for k in range(count)], "    "),
        *[
            f"    out{j}[i] = kp::store<{element_type(item)}>(o{j});"
            for j, item in enumerate(kernel.outputs)
        ],
        "  }",
        "}",
    ]
    return "\n".join(lines)


def _launcher(kernel: FusedKernel) -> str:
    general = (
        f"{kernel.name}_general<scalar_t>{GRID}("
        + cuda_launch.kernel_args(
            kernel, False, [f"*static_cast<const kp::Geometry<{len(kernel.inputs)}>*>(l.geometry)",
                            "l.numel"],
        )
        + ")"
    )  # fmt: skip
    if not kernel.fast_path:
        return cuda_launch.launcher(kernel, [], general)
    args = cuda_launch.kernel_args(kernel, True, ["l.numel", "l.cols"])
    variants = SCALAR if kernel.has_bool else VECTORIZED + SCALAR
    cases = [
        (variant, f"{kernel.name}_fast<scalar_t, {width}, {flat}>{GRID}({args})")
        for variant, width, flat in variants
    ]
    if not kernel.has_bool:
        rowwise = cuda_launch.kernel_args(kernel, True, ["l.cols", "l.across"])
        cases.append((ROWWISE, f"{kernel.name}_rowwise<scalar_t, kVec>{GRID}({rowwise})"))
    return cuda_launch.launcher(kernel, cases, general)


def _host(kernel: FusedKernel) -> list[str]:
    """The wrapper's launch: the fast path's variant where the plan allows, else the general."""
    lines = cuda_launch.host_start(kernel, "ins")
    count = len(kernel.inputs)
    general = [
        f"kp::Geometry<{count}> geo = kp::geometry<{count}>(ins, sizes);",
        f"l.variant = {GENERAL};",
        "l.geometry = &geo;",
        "l.numel = numel;",
        "l.blocks = kp::blocks_for(numel);",
        cuda_launch.host_finish(kernel),
    ]
    if not kernel.fast_path:
        return [*lines, *general]
    lines += [
        "if (plan.fast) {",
        "  const bool flat = plan.rows == 1;",
        "  const int64_t kVec = kp::vector_width(dtype);",
        f"  const bool vectorize = {_vectorizable(kernel)};",
        "  l.variant = (vectorize ? 0 : 2) + (flat ? 0 : 1);",
        "  l.blocks = kp::blocks_for(vectorize ? numel / kVec : numel);",
        f"  if (!flat && vectorize && kp::rowwise_grid(plan.rows, plan.cols / kVec, l)) "
        f"l.variant = {ROWWISE};",
        "  l.numel = numel;",
        "  l.cols = plan.cols;",
        *[f"  {line}" for line in cuda_launch.host_rows("plan")],
        f"  {cuda_launch.host_finish(kernel)}",
        "} else {",
        *[f"  {line}" for line in general],
        "}",
    ]
    return lines


def _vectorizable(kernel: FusedKernel) -> str:
    if kernel.has_bool:
        return "false"
    terms = []
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            terms.append(f"kp::aligned(in{k}.data_ptr())")
            terms.append(f"(flat || plan.row_strides[{k}] % kVec == 0)")
    terms += [f"kp::aligned(out{j}.data_ptr())" for j in range(len(kernel.outputs))]
    terms.append("(flat || plan.cols % kVec == 0)")
    return " && ".join(terms)
