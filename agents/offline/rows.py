"""Row kernels: a fused group with one reduction over the last dimension.

Per row of the group's iteration shape (``rows x cols``, split at the last dimension): the ops
before the reduction give each element's value (``<name>_pre``), the row is reduced, and the ops
after it (``<name>_post``, handed the reduced value) give the outputs. Two families of
reductions: a softmax or log-softmax (the row's maximum and sum of exponentials, ``RowStats``;
the reduced value differs per element), and a row's sum, mean or 2-norm kept as a dimension of 1
(a sum of the values or of their squares, ``RowSum``; one reduced value a row, which the ops
after it broadcast: KernelBench's L1 and L2 norms, ``x / x.abs().mean(-1, keepdim=True)``). This
module has what both backends share: those two functions, the row statistics (``ROW_STATS``,
``ROW_SPLIT``), the reduced value, and the host's plan of the inputs (their dense copies where
their strides cannot be read a row at a time). The kernels: ``agents.offline.rows_cuda`` and
``agents.offline.rows_cpu``.

Values are as ATen's: a NaN in a row makes the row NaN, a +inf makes a softmax's row NaN, and a
row of -inf is NaN; a -inf among finite values is 0 (softmax) or -inf (log-softmax). Sums add in
float (double on cpu) in another order than ATen's, so they differ from its by rounding.
"""

from __future__ import annotations

from agents.offline.cxx_common import pointer_args
from agents.offline.kernel import ROW_VALUE, FusedKernel
from agents.offline.ops import SOFTMAX_KINDS, SUM_KINDS

# Where the proposer makes row kernels: the devices and row widths they were measured to win at
# (bench/BENCHMARKS.md, section 23). On an H200 the CUDA kernel took a softmax of 4096 x 393216
# at 1.25x eager; rows up to 50257 wide were measured only with two later variants of it, each
# slower than eager there (0.38-0.74x), and the CPU kernel is many times slower than ATen's
# vectorized softmax. Elsewhere a softmax stays PyTorch's call, as before.
ROW_DEVICES = {"cuda"}
ROW_MIN_WIDTH = 65536
# A row's sum (mean, 2-norm) and the ops around it: eager takes a pass per op and one for the
# sum (KernelBench's L1 norm: five over its input's size), the row kernel two reads and a write
# (grouping.worth_a_kernel: only where that is fewer). On an H200 the L1 norm's kernel took
# 2.45x eager at rows of 1024, 1.15-1.18x at 65535 (bench/BENCHMARKS.md, section 23b); narrower
# rows were not measured.
SUM_MIN_WIDTH = 1024


def row_min_widths(device: str) -> dict[str, int] | None:
    """The narrowest row a row kernel takes on ``device``, by reduction kind; None: no row
    kernels there."""
    if device not in ROW_DEVICES:
        return None
    return {kind: ROW_MIN_WIDTH for kind in SOFTMAX_KINDS} | {
        kind: SUM_MIN_WIDTH for kind in SUM_KINDS
    }


ROW_STATS = r"""
namespace kp {

// A row's maximum m and sum s of exp(x - m).
struct RowStats {
  float m;
  float s;
};

// A row's sum (of its values, or of their squares for a 2-norm).
struct RowSum {
  float s;
};

// ATen's result for a row holding +inf is NaN everywhere (exp(inf - inf) enters its sum).
KP_INLINE RowStats finished(RowStats st) {
  if (st.m == INFINITY) st.s = NAN;
  return st;
}

}  // namespace kp
"""

ROW_SPLIT = r"""
namespace kp {

// A row kernel's rows: the last dimension of the shape it is called with (one row if 0-d).
inline int64_t last_split(const std::vector<int64_t>& sizes) {
  return std::max<int64_t>(0, static_cast<int64_t>(sizes.size()) - 1);
}

}  // namespace kp
"""

# A CPU kernel's file has both; a CUDA candidate's .cu the stats, its host file the split.
ROW_HELPERS = ROW_STATS + ROW_SPLIT


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


def sums(kernel: FusedKernel) -> bool:
    """Whether the kernel's reduction is a row's sum, mean or 2-norm (``RowSum``), not a
    softmax (``RowStats``)."""
    assert kernel.row is not None
    return kernel.row.kind in SUM_KINDS


def row_term(kernel: FusedKernel, x: str) -> str:
    """What a row's sum adds for the value ``x``."""
    assert kernel.row is not None
    return f"{x} * {x}" if kernel.row.kind == "norm" else x


def row_constant(kernel: FusedKernel, indent: str) -> list[str]:
    """``row_scale``, from the row's stats ``st`` (and its width ``cols``)."""
    assert kernel.row is not None
    scale = {
        "softmax": "st.s",
        "log_softmax": "kp::log(st.s)",
        "sum": "st.s",
        "mean": "st.s / static_cast<float>(cols)",
        "norm": "kp::sqrt(st.s)",
    }[kernel.row.kind]
    return [f"{indent}const float row_scale = {scale};"]


def row_value(kernel: FusedKernel) -> str:
    """The reduction's value for the element ``x`` of a row with stats ``st``."""
    assert kernel.row is not None
    if kernel.row.kind == "softmax":
        return "kp::exp(x - st.m) / row_scale"
    if kernel.row.kind == "log_softmax":
        return "x - st.m - row_scale"
    return "row_scale"


def dense_plan(kernel: FusedKernel) -> list[str]:
    """The wrapper's plan or, where an input cannot be read a row at a time as called (a
    transposed view, a broadcast other than the traced one), the plan of copies of the inputs
    at the shape the kernel reads them: a whole row each, or one value a row (a guard made sure
    that those have a last dimension of 1)."""
    columns = ", ".join("true" if item.contiguous_columns else "false" for item in kernel.inputs)
    return [
        "std::vector<at::Tensor> dense = ins;",
        "kp::Plan rows_plan = plan;",
        "if (!rows_plan.fast) {",
        "  std::vector<int64_t> one_a_row = sizes;",
        "  if (!one_a_row.empty()) one_a_row.back() = 1;",
        f"  const std::vector<bool> whole_rows = {{{columns}}};",
        "  for (size_t k = 0; k < dense.size(); ++k) {",
        "    dense[k] = dense[k].expand(whole_rows[k] ? sizes : one_a_row).contiguous();",
        "  }",
        "  rows_plan = kp::plan_fast(dense, whole_rows, sizes, {kp::last_split(sizes)});",
        "}",
        f'TORCH_CHECK(rows_plan.fast, "{kernel.name}: inputs that cannot be read a row at a time");',
        "const int64_t rows = rows_plan.rows;",
        "const int64_t cols = rows_plan.cols;",
    ]


def dense_args(kernel: FusedKernel) -> list[str]:
    """A row kernel's arguments from the inputs as it reads them (``dense_plan``)."""
    return pointer_args(kernel, inputs="dense[{k}].data_ptr<{type}>()")
