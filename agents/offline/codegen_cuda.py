"""CUDA source for the GPU backend: a ``.cu`` file of kernels with no ATen header, and a host
file of wrappers (``agents.offline.cuda_launch`` says how they meet).

A pointwise group gets its kernels from ``agents.offline.cuda_pointwise`` (fast, rowwise and
general); the host wrapper picks one per call: the vectorized fast path when every row-read
input is 16-byte aligned and rows hold whole vectors, the rowwise kernel where rows are long,
else the general. A group with a row reduction gets a row kernel instead
(``agents.offline.rows``, ``agents.offline.rows_cuda``). A group reading a convolution's output
channels-last has a tiled kernel too, which the wrapper takes first where it can
(``agents.offline.conv_layout``, ``agents.offline.cuda_epilogue``). Launches go on the current
stream and are checked.
"""

from __future__ import annotations

from agents.offline import cuda_epilogue, cuda_launch, cuda_pointwise, cuda_tiles
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
    op_function,
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
    if any(kernel.nhwc_input is not None for kernel in kernels):  # and kp_channels_last
        host += [cuda_tiles.SHARED, cuda_tiles.HOST, cuda_epilogue.HOST]
        device += [cuda_tiles.SHARED, cuda_tiles.DEVICE]
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
        if kernel.nhwc_input is not None:
            device.append(cuda_epilogue.epilogue(kernel))
        if kernel.fast_path:
            device.append(cuda_pointwise.fast(kernel))
            if not kernel.has_bool:
                device.append(cuda_pointwise.rowwise(kernel))
        device += [cuda_pointwise.general(kernel), _launcher(kernel)]
        host.append(wrapper(kernel, _host(kernel), dispatch=False))
    return _joined(host), _joined(device)


def _joined(parts: list[str]) -> str:
    return "\n".join(part.strip("\n") + "\n" for part in parts)


def _launcher(kernel: FusedKernel) -> str:
    general = (
        f"{kernel.name}_general<scalar_t>{GRID}("
        + cuda_launch.kernel_args(
            kernel, False, [f"*static_cast<const kp::Geometry<{len(kernel.inputs)}>*>(l.geometry)",
                            "l.numel"],
        )
        + ")"
    )  # fmt: skip
    tiled = cuda_epilogue.launch_cases(kernel) if kernel.nhwc_input is not None else []
    if not kernel.fast_path:
        return cuda_launch.launcher(kernel, tiled, general)
    args = cuda_launch.kernel_args(kernel, True, ["l.numel", "l.cols"])
    variants = SCALAR if kernel.has_bool else VECTORIZED + SCALAR
    cases = [
        (variant, f"{kernel.name}_fast<scalar_t, {width}, {flat}>{GRID}({args})")
        for variant, width, flat in variants
    ]
    if not kernel.has_bool:
        rowwise = cuda_launch.kernel_args(kernel, True, ["l.cols", "l.across"])
        cases.append((ROWWISE, f"{kernel.name}_rowwise<scalar_t, kVec>{GRID}({rowwise})"))
    return cuda_launch.launcher(kernel, cases + tiled, general)


def _host(kernel: FusedKernel) -> list[str]:
    """The wrapper's launch: the tiled kernel of a channels-last input where it can be taken,
    else the fast path's variant where the plan allows, else the general."""
    start = cuda_launch.host_start(kernel, "ins")
    lines = _usual_paths(kernel)
    if kernel.nhwc_input is not None:
        lines = cuda_epilogue.host_branch(kernel, lines, cuda_launch.host_finish(kernel))
    return start + lines


def _usual_paths(kernel: FusedKernel) -> list[str]:
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
        return general
    return [
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
