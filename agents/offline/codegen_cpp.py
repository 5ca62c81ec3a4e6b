"""C++ (OpenMP) source for the CPU backend.

The fast path splits the ``rows x cols`` iteration space into tiles of up to ``kp::kTile``
columns, shares the tiles among OpenMP threads, and runs a ``#pragma omp simd`` loop over each
tile's columns in a function cloned per instruction set (AVX-512, AVX2+FMA, baseline; GCC's
``target_clones``). Inputs read once per row, and the values computed from them alone (the
``rsqrt(var + eps)`` of a hand-written norm), are computed once per row, outside that loop.
The general path walks
rows of the broadcast output and indexes every input with its broadcast strides. A group with a
row reduction gets a row kernel instead (``agents.offline.rows``).
"""

from __future__ import annotations

from agents.offline.cpu_math import CPU_MATH
from agents.offline.cxx_common import (
    element_type,
    op_call,
    op_function,
    pointer_args,
    pointer_params,
    wrapper,
)
from agents.offline.cxx_helpers import ELEMENT_HELPERS, HOST_HELPERS
from agents.offline.kernel import FusedKernel, row_invariant
from agents.offline.rows import ROW_HELPERS, row_functions
from agents.offline.rows_cpu import cpu_row_kernel, cpu_row_launch

CPU_FLAGS = ["-O3", "-fopenmp"]

_PRELUDE = r"""
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#define KP_INLINE inline __attribute__((always_inline))
#define KP_HD
// The math below is branch-free selects; GCC turns them into vector blends only when it may
// assume that floating-point operations do not trap (no change to any result).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
// Tile loops are compiled for AVX-512, AVX2+FMA and baseline x86-64, picked at load time.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define KP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KP_CLONES
#endif

namespace kp {

constexpr int64_t kTile = 4096;
constexpr int64_t kSerialBelow = 32768;  // elements; fewer run on one thread

inline int threads_for(int64_t work) {
  return work < kSerialBelow ? 1 : std::max(1, at::get_num_threads());
}

}  // namespace kp
"""


def cpu_source(kernels: list[FusedKernel]) -> str:
    parts = [_PRELUDE, CPU_MATH, ELEMENT_HELPERS, HOST_HELPERS]
    if any(kernel.row is not None for kernel in kernels):
        parts.append(ROW_HELPERS)
    for kernel in kernels:
        if kernel.row is not None:
            parts += [row_functions(kernel), cpu_row_kernel(kernel)]
            parts.append(wrapper(kernel, cpu_row_launch(kernel)))
            continue
        parts.append(op_function(kernel))
        if kernel.fast_path:
            parts.append(_fast(kernel))
        parts.append(_general(kernel))
        parts.append(wrapper(kernel, _launch(kernel)))
    return "\n".join(part.strip("\n") + "\n" for part in parts)


def _fast(kernel: FusedKernel) -> str:
    return _tile(kernel) + "\n\n" + _tile_loop(kernel)


def _tile(kernel: FusedKernel) -> str:
    """One row's columns [begin, end): row-invariant values first, then a simd loop.

    Cloned per ISA, so the loop gets AVX2/AVX-512 where the CPU has them.
    """
    invariant = row_invariant(kernel)
    params, loads = [], []
    for k, item in enumerate(kernel.inputs):
        if item.contiguous_columns:
            params.append(f"const {element_type(item)}* __restrict__ row{k}")
            loads.append(f"    const float a{k} = kp::load(row{k}[j]);")
        else:
            params.append(f"const float a{k}")
    params += [f"const float s{k}" for k in range(len(kernel.scalars))]
    params += [
        f"{element_type(item)}* __restrict__ dst{j}" for j, item in enumerate(kernel.outputs)
    ]
    params += ["const int64_t begin", "const int64_t end"]
    return "\n".join(
        [
            "template <typename scalar_t>",
            f"KP_CLONES void {kernel.name}_tile({', '.join(params)}) {{",
            *[f"  const float {name} = {text};" for name, text in kernel.body if name in invariant],
            "#pragma omp simd",
            "  for (int64_t j = begin; j < end; ++j) {",
            *loads,
            *[
                f"    const float {name} = {text};"
                for name, text in kernel.body
                if name not in invariant
            ],
            *[
                f"    dst{j}[j] = kp::store<{element_type(item)}>({item.value});"
                for j, item in enumerate(kernel.outputs)
            ],
            "  }",
            "}",
        ]
    )


def _tile_loop(kernel: FusedKernel) -> str:
    """Rows x tiles of columns, shared among OpenMP threads."""
    args = []
    for k, item in enumerate(kernel.inputs):
        row = f"in{k} + kp::row_in_run(r, rd{k}, rm{k}) * rs{k}"
        args.append(row if item.contiguous_columns else f"kp::load(*({row}))")
    args += [f"s{k}" for k in range(len(kernel.scalars))]
    args += [f"out{j} + r * cols" for j in range(len(kernel.outputs))]
    params = [*pointer_params(kernel), "const kp::Plan& plan"]
    return "\n".join(
        [
            "template <typename scalar_t>",
            f"void {kernel.name}_fast({', '.join(params)}) {{",
            "  const int64_t rows = plan.rows;",
            "  const int64_t cols = plan.cols;",
            "  const int64_t tiles_per_row = (cols + kp::kTile - 1) / kp::kTile;",
            *[
                f"  const int64_t rs{k} = plan.row_strides[{k}], rd{k} = plan.row_divs[{k}], "
                f"rm{k} = plan.row_mods[{k}];"
                for k in range(len(kernel.inputs))
            ],
            "#pragma omp parallel for schedule(static) num_threads(kp::threads_for(rows * cols))",
            "  for (int64_t tile = 0; tile < rows * tiles_per_row; ++tile) {",
            "    const int64_t r = tile / tiles_per_row;",
            "    const int64_t begin = (tile - r * tiles_per_row) * kp::kTile;",
            "    const int64_t end = std::min(begin + kp::kTile, cols);",
            f"    {kernel.name}_tile<scalar_t>({', '.join([*args, 'begin', 'end'])});",
            "  }",
            "}",
        ]
    )


def _general(kernel: FusedKernel) -> str:
    count = len(kernel.inputs)
    params = [*pointer_params(kernel), f"const kp::Geometry<{count}>& geo", "const int64_t numel"]
    lines = [
        "template <typename scalar_t>",
        f"void {kernel.name}_general({', '.join(params)}) {{",
        "  const int last = geo.ndim - 1;",
        "  const int64_t cols = last >= 0 ? geo.sizes[last] : 1;",
        "  const int64_t rows = numel / cols;",
        *[f"  const int64_t cs{k} = last >= 0 ? geo.strides[{k}][last] : 0;" for k in range(count)],
        "#pragma omp parallel for schedule(static) num_threads(kp::threads_for(numel))",
        "  for (int64_t r = 0; r < rows; ++r) {",
        f"    int64_t off[{count}];",
        "    geo.offsets(r, last - 1, off);",
        "    for (int64_t j = 0; j < cols; ++j) {",
    ]
    loads = [f"kp::load(in{k}[off[{k}] + j * cs{k}])" for k in range(count)]
    lines += op_call(kernel, loads, "      ")
    lines += [
        f"      out{j}[r * cols + j] = kp::store<{element_type(item)}>(o{j});"
        for j, item in enumerate(kernel.outputs)
    ]
    lines += ["    }", "  }", "}"]
    return "\n".join(lines)


def _launch(kernel: FusedKernel) -> list[str]:
    args = ", ".join(pointer_args(kernel))
    general = (
        f"{kernel.name}_general<scalar_t>({args}, "
        f"kp::geometry<{len(kernel.inputs)}>(ins, sizes), numel);"
    )
    if not kernel.fast_path:
        return [general]
    return [
        "if (plan.fast) {",
        f"  {kernel.name}_fast<scalar_t>({args}, plan);",
        "} else {",
        f"  {general}",
        "}",
    ]
