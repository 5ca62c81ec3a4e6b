"""The CPU row kernel (``agents.offline.rows``): each OpenMP thread takes whole rows, puts the
values before a softmax into a buffer, then takes the maximum and the sum of exponentials (in
double), as ATen's softmax does; or takes the row's sum (in double); and writes the outputs.
"""

from __future__ import annotations

from agents.offline.cxx_common import element_type, pointer_params
from agents.offline.kernel import FusedKernel
from agents.offline.rows import dense_args, dense_plan, row_constant, row_term, row_value, sums


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
        # a softmax's values before it, kept for its second pass (a sum needs none of them)
        *([] if sums(kernel) else ["    std::vector<float> cache(static_cast<size_t>(cols));"]),
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
        *(_sum(kernel, pre) if sums(kernel) else _softmax_stats(pre)),
        *row_constant(kernel, "      "),
        "      for (int64_t j = 0; j < cols; ++j) {",
        *([] if sums(kernel) else ["        const float x = cache[j];"]),
        f"        float {', '.join(outputs)};",
        f"        {kernel.name}_post<scalar_t>("
        f"{', '.join([*loads, *scalars, row_value(kernel), *outputs])});",
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


def _softmax_stats(pre: str) -> list[str]:
    return [
        "      float m = -INFINITY;",
        "      for (int64_t j = 0; j < cols; ++j) {",
        f"        cache[j] = {pre};",
        "        m = kp::maximum(m, cache[j]);",
        "      }",
        "      double sum = 0.0;",
        "      for (int64_t j = 0; j < cols; ++j) sum += kp::exp(cache[j] - m);",
        "      const kp::RowStats st = kp::finished(kp::RowStats{m, static_cast<float>(sum)});",
    ]


def _sum(kernel: FusedKernel, pre: str) -> list[str]:
    return [
        "      double sum = 0.0;",
        "      for (int64_t j = 0; j < cols; ++j) {",
        f"        const double x = {pre};",
        f"        sum += {row_term(kernel, 'x')};",
        "      }",
        "      const kp::RowSum st{static_cast<float>(sum)};",
    ]


def cpu_row_launch(kernel: FusedKernel) -> list[str]:
    return [
        *dense_plan(kernel),
        f"{kernel.name}_rows<scalar_t>({', '.join(dense_args(kernel))}, rows_plan);",
    ]
