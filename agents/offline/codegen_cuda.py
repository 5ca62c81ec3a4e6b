"""CUDA source for the GPU backend.

One ``__global__`` fast kernel per group, a grid-stride loop over 16-byte vectors (4 floats, 8
halves) when every row-read input is 16-byte aligned and rows hold whole vectors, with a scalar
tail; ``FLAT`` instantiations (one row) skip the row/column split. A second, general kernel
indexes inputs by broadcast strides. A group with a row reduction gets a row kernel instead
(``agents.offline.rows``, ``agents.offline.rows_cuda``). Launches go on the current stream and are checked.
"""

from __future__ import annotations

from agents.offline.cxx_common import (
    element_type,
    op_call,
    op_function,
    pointer_args,
    pointer_params,
    signature,
    wrapper,
)
from agents.offline.cxx_helpers import ELEMENT_HELPERS, HOST_HELPERS
from agents.offline.kernel import FusedKernel
from agents.offline.rows import ROW_HELPERS, row_functions
from agents.offline.rows_cuda import CUDA_ROW_HELPERS, cuda_row_kernel, cuda_row_launch

CUDA_FLAGS = ["-O3"]

_PRELUDE = r"""
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

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

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T val[N];
};

template <int N, typename T>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}

template <int N, typename T>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

inline bool aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

constexpr int kThreads = 256;

inline int64_t blocks_for(int64_t work) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  return std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, sms * 8));
}

}  // namespace kp
"""


def cuda_sources(kernels: list[FusedKernel]) -> tuple[str, str]:
    """(C++ declarations for the bindings, the .cu source with kernels and wrappers)."""
    declarations = "\n".join(f"{signature(kernel)};" for kernel in kernels) + "\n"
    parts = [_PRELUDE, ELEMENT_HELPERS, HOST_HELPERS]
    if any(kernel.row is not None for kernel in kernels):
        parts += [ROW_HELPERS, CUDA_ROW_HELPERS]
    for kernel in kernels:
        if kernel.row is not None:
            parts += [row_functions(kernel), cuda_row_kernel(kernel)]
            parts.append(wrapper(kernel, cuda_row_launch(kernel)))
            continue
        parts.append(op_function(kernel))
        if kernel.fast_path:
            parts.append(_fast(kernel))
        parts.append(_general(kernel))
        parts.append(wrapper(kernel, _launch(kernel)))
    return declarations, "\n".join(part.strip("\n") + "\n" for part in parts)


def _fast(kernel: FusedKernel) -> str:
    params = pointer_params(kernel, row_strides=True)
    params += ["const int64_t numel", "const int64_t cols"]
    lines = [
        "template <typename scalar_t, int VEC, bool FLAT>",
        f"__global__ void {kernel.name}_fast({', '.join(params)}) {{",
        "  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;",
        "  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;",
        "  const int64_t vectors = numel / VEC;",
        "  for (int64_t v = first; v < vectors; v += step) {",
        "    const int64_t base = v * VEC;",
        "    const int64_t row = FLAT ? 0 : kp::quotient(base, cols);",
        "    const int64_t col = FLAT ? base : base - row * cols;",
    ]
    lines += _row_offsets(kernel)
    lane_loads, tail_loads = [], []
    for k, item in enumerate(kernel.inputs):
        kind = element_type(item)
        if item.contiguous_columns:
            lines.append(
                f"    const kp::Vec<{kind}, VEC> x{k} = kp::load_vec<VEC>(in{k} + r{k} + col);"
            )
            lane_loads.append(f"kp::load(x{k}.val[i])")
            tail_loads.append(f"kp::load(in{k}[r{k} + col])")
        else:
            lines.append(f"    const float b{k} = kp::load(in{k}[r{k}]);")
            lane_loads.append(f"b{k}")
            tail_loads.append(f"kp::load(in{k}[r{k}])")
    lines += [
        f"    kp::Vec<{element_type(item)}, VEC> y{j};" for j, item in enumerate(kernel.outputs)
    ]
    lines += ["#pragma unroll", "    for (int i = 0; i < VEC; ++i) {"]
    lines += op_call(kernel, lane_loads, "      ")
    lines += [
        f"      y{j}.val[i] = kp::store<{element_type(item)}>(o{j});"
        for j, item in enumerate(kernel.outputs)
    ]
    lines.append("    }")
    lines += [f"    kp::store_vec<VEC>(out{j} + base, y{j});" for j in range(len(kernel.outputs))]
    lines += [
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


def _launch(kernel: FusedKernel) -> list[str]:
    name = kernel.name
    general = (
        f"{name}_general<scalar_t><<<kp::blocks_for(numel), kp::kThreads, 0, stream>>>("
        f"{', '.join(pointer_args(kernel))}, "
        f"kp::geometry<{len(kernel.inputs)}>(ins, sizes), numel);"
    )
    lines = [
        "const c10::cuda::CUDAGuard guard(in0.device());",
        "const cudaStream_t stream = at::cuda::getCurrentCUDAStream();",
    ]
    if not kernel.fast_path:
        return [*lines, general, "C10_CUDA_KERNEL_LAUNCH_CHECK();"]
    args = ", ".join([*pointer_args(kernel, row_strides=True), "numel", "plan.cols"])
    launch = "<<<blocks, kp::kThreads, 0, stream>>>"
    lines += [
        "if (plan.fast) {",
        "  const bool flat = plan.rows == 1;",
        "  constexpr int kVec = 16 / sizeof(scalar_t);",
        f"  const bool vectorize = {_vectorizable(kernel)};",
        "  const int64_t blocks = kp::blocks_for(vectorize ? numel / kVec : numel);",
    ]
    if kernel.has_bool:  # bool tensors are read and written one element at a time
        lines += [
            f"  if (flat) {{ {name}_fast<scalar_t, 1, true>{launch}({args}); }}",
            f"  else {{ {name}_fast<scalar_t, 1, false>{launch}({args}); }}",
        ]
    else:
        lines += [
            f"  if (vectorize && flat) {{ {name}_fast<scalar_t, kVec, true>{launch}({args}); }}",
            f"  else if (vectorize) {{ {name}_fast<scalar_t, kVec, false>{launch}({args}); }}",
            f"  else if (flat) {{ {name}_fast<scalar_t, 1, true>{launch}({args}); }}",
            f"  else {{ {name}_fast<scalar_t, 1, false>{launch}({args}); }}",
        ]
    lines += ["} else {", f"  {general}", "}", "C10_CUDA_KERNEL_LAUNCH_CHECK();"]
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
