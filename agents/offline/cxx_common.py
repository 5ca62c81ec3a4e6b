"""C++ shared by the CPU and CUDA backends, generated per kernel: its parameters and
arguments, the op function and the host wrapper that the Python ``forward`` calls. The fixed
helpers every kernel uses (element loads and stores, host-side planning) are in
``agents.offline.cxx_helpers``.
"""

from __future__ import annotations

import torch

from agents.offline.kernel import FusedKernel, KernelInput, KernelOutput

# The dtypes a kernel computes as eager PyTorch does: the wrapper's dispatch below takes double
# too, but every value is computed in float, so a float64 call would silently lose precision.
COMPUTED_IN_FLOAT = (torch.float32, torch.float16, torch.bfloat16)


def element_type(item: KernelInput | KernelOutput) -> str:
    return "bool" if item.is_bool else "scalar_t"


def pointer_params(kernel: FusedKernel, row_strides: bool = False) -> list[str]:
    params = []
    for k, item in enumerate(kernel.inputs):
        params.append(f"const {element_type(item)}* __restrict__ in{k}")
        if row_strides:
            params += [f"const int64_t rs{k}", f"const int64_t rd{k}", f"const int64_t rm{k}"]
    params += [f"const float s{k}" for k in range(len(kernel.scalars))]
    params += [
        f"{element_type(item)}* __restrict__ out{j}" for j, item in enumerate(kernel.outputs)
    ]
    return params


def pointer_args(
    kernel: FusedKernel,
    inputs: str = "in{k}.data_ptr<{type}>()",
    rows: str | None = None,
    scalars: str = "s{k}",
    outputs: str = "out{k}.data_ptr<{type}>()",
) -> list[str]:
    """A kernel's arguments in ``pointer_params``' order, each a format of the item's number
    ``k`` and element ``type``; ``rows`` (of ``k`` and ``field``: strides, divs, mods), where
    given, follows each input with its row map."""
    args = []
    for k, item in enumerate(kernel.inputs):
        args.append(inputs.format(k=k, type=element_type(item)))
        if rows is not None:
            args += [rows.format(k=k, field=field) for field in ("strides", "divs", "mods")]
    args += [scalars.format(k=k) for k in range(len(kernel.scalars))]
    args += [outputs.format(k=j, type=element_type(item)) for j, item in enumerate(kernel.outputs)]
    return args


def op_function(kernel: FusedKernel) -> str:
    """The fused computation of one element, from loaded floats to output floats."""
    params = [f"const float a{k}" for k in range(len(kernel.inputs))]
    params += [f"const float s{k}" for k in range(len(kernel.scalars))]
    params += [f"float& o{j}" for j in range(len(kernel.outputs))]
    lines = [
        "template <typename scalar_t>",
        f"KP_INLINE void {kernel.name}_op({', '.join(params)}) {{",
    ]
    lines += [f"  const float {name} = {text};" for name, text in kernel.body]
    lines += [f"  o{j} = {item.value};" for j, item in enumerate(kernel.outputs)]
    lines.append("}")
    return "\n".join(lines)


def op_call(kernel: FusedKernel, inputs: list[str], indent: str) -> list[str]:
    outputs = [f"o{j}" for j in range(len(kernel.outputs))]
    scalars = [f"s{k}" for k in range(len(kernel.scalars))]
    return [
        f"{indent}float {', '.join(outputs)};",
        f"{indent}{kernel.name}_op<scalar_t>({', '.join([*inputs, *scalars, *outputs])});",
    ]


def signature(kernel: FusedKernel) -> str:
    params = [f"const at::Tensor& in{k}" for k in range(len(kernel.inputs))]
    params += [f"double s{k}_value" for k in range(len(kernel.scalars))]
    returns = "at::Tensor" if len(kernel.outputs) == 1 else "std::vector<at::Tensor>"
    return f"{returns} {kernel.name}({', '.join(params)})"


def wrapper(kernel: FusedKernel, launch: list[str], dispatch: bool = True) -> str:
    """The host function: broadcast, check, allocate, plan, then ``launch``: per dtype
    (``scalar_t``) where ``dispatch``, else once (it reads ``dtype``)."""
    name = kernel.name
    tensors = ", ".join(f"in{k}" for k in range(len(kernel.inputs)))
    flags = ", ".join("true" if item.is_bool else "false" for item in kernel.inputs)
    columns = ", ".join("true" if item.contiguous_columns else "false" for item in kernel.inputs)
    lines = [
        f"{signature(kernel)} {{",
        f"  const std::vector<at::Tensor> ins = {{{tensors}}};",
        "  const std::vector<int64_t> sizes = kp::broadcast_sizes(ins);",
        f"  const at::ScalarType dtype = {_dtype_expression(kernel)};",
        f'  kp::check_inputs(ins, {{{flags}}}, dtype, "{name}");',
    ]
    for j, item in enumerate(kernel.outputs):
        dtype = "at::kBool" if item.is_bool else "dtype"
        lines.append(f"  at::Tensor out{j} = at::empty(sizes, in0.options().dtype({dtype}));")
    lines += [
        f"  const float s{k} = static_cast<float>(s{k}_value);" for k in range(len(kernel.scalars))
    ]
    if not kernel.fast_path:
        plan = "  const kp::Plan plan;  // traced broadcasts need the general path"
    else:
        # No traced broadcast fixes the split: flat first, else rows along the last dimension.
        # A row kernel's rows are the last dimension of the shape it is called with (the
        # reduced value's rank may differ from the traced one: x.squeeze()).
        splits = (
            "kp::last_split(sizes)"
            if kernel.row is not None
            else "0, static_cast<int64_t>(sizes.size()) - 1"
            if kernel.split is None
            else kernel.split
        )
        plan = f"  const kp::Plan plan = kp::plan_fast(ins, {{{columns}}}, sizes, {{{splits}}});"
    lines += [
        "  const int64_t numel = out0.numel();",
        "  if (numel == 0) {",
        f"    return {_returned(kernel)};",
        "  }",
        plan,
    ]
    if dispatch:
        lines += [
            "  AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, "
            f'dtype, "{name}", [&] {{',
            *[f"    {line}" if line else "" for line in launch],
            "  });",
        ]
    else:
        lines += [f"  {line}" if line else "" for line in launch]
    lines += [f"  return {_returned(kernel)};", "}"]
    return "\n".join(lines)


def _returned(kernel: FusedKernel) -> str:
    outputs = [f"out{j}" for j in range(len(kernel.outputs))]
    return outputs[0] if len(outputs) == 1 else "{" + ", ".join(outputs) + "}"


def _dtype_expression(kernel: FusedKernel) -> str:
    for k, item in enumerate(kernel.inputs):
        if not item.is_bool:
            return f"in{k}.scalar_type()"
    names = {"float32": "Float", "float16": "Half", "bfloat16": "BFloat16"}
    return f"at::ScalarType::{names[str(kernel.dtype).removeprefix('torch.')]}"
