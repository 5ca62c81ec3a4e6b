"""The CUDA pointwise kernels of a fused group, as ``.cu`` text (``agents.offline.codegen_cuda``
puts them in the file and launches them):

- ``<name>_fast``: a grid-stride loop over 16-byte vectors of a rows x cols plan, a scalar tail;
  ``FLAT`` instantiations (one row) skip the row/column split;
- ``<name>_rowwise``: rows of ``kp::kRowwiseVectors`` vectors or more, a block a stretch of one
  row, the row found once per thread (bench/BENCHMARKS.md, section 25);
- ``<name>_general``: any broadcast, each input indexed by its strides.
"""

from __future__ import annotations

from agents.offline.cxx_common import element_type, op_call, pointer_params
from agents.offline.kernel import FusedKernel


def fast(kernel: FusedKernel) -> str:
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
        *_element_stores(kernel),
        "  }",
        "}",
    ]
    return "\n".join(lines)


def rowwise(kernel: FusedKernel) -> str:
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


def general(kernel: FusedKernel) -> str:
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
        *_element_stores(kernel),
        "  }",
        "}",
    ]
    return "\n".join(lines)


def _element_stores(kernel: FusedKernel) -> list[str]:
    """Each output's element ``i``, from the op's result ``o<j>`` (a loop's body)."""
    return [
        f"    out{j}[i] = kp::store<{element_type(item)}>(o{j});"
        for j, item in enumerate(kernel.outputs)
    ]
