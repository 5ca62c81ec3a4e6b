"""The reference's forward as the workers take it: its result as a list of tensors, whether
it is finite, its outputs on the host, a line describing its inputs, and the errors that are
the user's to fix (outputs that are not finite, a forward that does not fit the device; and,
where the reference worker first sees them, dtypes the harness cannot verify, empty outputs,
inputs the forward changes in place).

The reference worker, the comparator's and the baseline's use them alike.
"""

from __future__ import annotations

import torch

from harness.errors import UserError
from harness.problem.variants import copy_with_layout
from harness.sandbox.jobs import WorkerJob
from harness.sandbox.memory import asked_for, limit_hit
from harness.workers.calls import NotAnOutput, describe_form, leaves
from harness.workers.guards import equal_nan

# The dtypes verified end to end: the guard regions, the poison, the digests, the input
# variants and the comparison all work on them. Not complex (compared as its real part only,
# no guard value), float8 or wide unsigned ints (no sampling), packed or quantized ones.
VERIFIED_DTYPES = (
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
)


def as_outputs(value, where: str) -> tuple[list[torch.Tensor], str]:
    """A forward's result as its tensors and its form (``harness.workers.calls``)."""
    try:
        outputs, form = leaves(value)
    except NotAnOutput as err:
        raise UserError(
            f"forward returned {type(value).__name__} holding {err}, which kernelpilot cannot "
            "compare",
            where=where,
            fix="return tensors, or tuples, lists, dicts, named tuples or dataclasses of "
            "tensors, None and plain values (numbers, strings)",
        ) from None
    if not outputs:
        raise UserError(
            f"forward returned {describe_form(form)}: no tensor to compute or check",
            where=where,
            fix="return the module's tensor results from forward",
        )
    return outputs, form


def describe_inputs(inputs: list) -> str:
    """The forward's inputs as a reader of a report takes them: ``float32[8, 1024], 0.5``."""
    parts = []
    for value in inputs:
        if isinstance(value, torch.Tensor):
            dtype = str(value.dtype).removeprefix("torch.")
            parts.append(f"{dtype}[{', '.join(str(size) for size in value.shape)}]")
        else:
            parts.append(repr(value)[:40])
    return ", ".join(parts)


def tensor_bytes(value) -> int:
    return value.numel() * value.element_size() if isinstance(value, torch.Tensor) else 0


def on_host(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor on the host in its own layout (a dense cpu tensor as it is: no copy)."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        return tensor
    return copy_with_layout(tensor, "cpu")


def finite(outputs: list[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(out).all()) for out in outputs if out.is_floating_point())


def nonfinite_error(job: WorkerJob, name: str) -> UserError:
    """A reference output with NaN or Inf makes every candidate fail (a candidate's output
    must be finite): the inputs are outside what the module computes, which is the spec's
    problem to fix, said once, not a failure of each candidate."""
    problem = job.problem
    return UserError(
        f"the reference's output holds NaN or Inf on the verification case '{name}': its "
        "inputs are outside what the module computes (log or sqrt of negatives, overflow)",
        where=f"{problem.inputs_path or problem.source_path}: {problem.inputs_fn or 'inputs'}()",
        fix="make the input factory produce inputs the module is meant for (e.g. "
        "torch.rand(...) + 0.1 for a log), so that its outputs are finite",
    )


def out_of_memory(problem, inputs: list, case: str, err: BaseException) -> UserError:
    """The reference ran out of memory on one case (the device's, or a cpu worker's limit):
    what it asked for, what it held, which limit it hit."""
    held = sum(tensor_bytes(x) for x in inputs)
    step = (
        f"the forward (its inputs alone take {held / 2**30:.2f} GiB)"
        if inputs
        else "drawing inputs"
    )
    size = asked_for(err)
    return UserError(
        f"the reference ran out of memory on the case '{case}' in {step}"
        + (f" allocating {size}" if size else "")
        + f"; {limit_hit(err)}; the harness holds one case at a time",
        where=f"{problem.inputs_path or problem.source_path}: {problem.inputs_fn or 'inputs'}()",
        fix="shrink the input shapes the input factory returns (or the module's sizes) until "
        "one forward fits, or raise the limit",
    )


def check_dtypes(values: list, what: str, where: str, fix: str) -> None:
    """A UserError on the first tensor among ``values`` (``what`` names them: "the
    forward's input") of a dtype the harness cannot verify."""
    for index, value in enumerate(values):
        if isinstance(value, torch.Tensor) and value.dtype not in VERIFIED_DTYPES:
            names = ", ".join(str(dtype).removeprefix("torch.") for dtype in VERIFIED_DTYPES)
            raise UserError(
                f"{what} {index} is {describe_inputs([value])}: kernelpilot verifies tensors "
                f"of these dtypes only: {names}",
                where=where,
                fix=f"{fix} (complex numbers as real pairs: torch.view_as_real), or leave this "
                "module out of kernelpilot's targets",
            )


def copies(inputs: list) -> list:
    """Copies of the tensor inputs (None for the rest), to tell whether a forward changed them."""
    return [value.clone() if isinstance(value, torch.Tensor) else None for value in inputs]


def check_unchanged(inputs: list, before: list, forward: str, where: str) -> None:
    """A UserError where the reference's forward changed an input in place: every caller
    (the candidates' checks, the timing) gives it fresh copies and holds a kernel to leave
    them as they were, so no kernel could stand in for such a forward."""
    for index, (now, then) in enumerate(zip(inputs, before, strict=True)):
        if then is not None and not equal_nan(now, then):
            raise UserError(
                f"{forward} changes its inputs in place (input {index}): "
                "kernelpilot compares outputs on fresh copies of the inputs and holds a kernel "
                "to leave its inputs as they were, so no kernel could replace this forward",
                where=where,
                fix="compute out of place in forward (y = x * s rather than x.mul_(s)), or clone "
                "the input first (x = x.clone())",
            )


def check_not_empty(inputs: list, outputs: list[torch.Tensor], where: str, inputs_where: str):
    """A UserError on an empty output: no element to compute, none to check (every answer,
    zeros included, passes); from zero-size inputs, most likely."""
    empty = [index for index, out in enumerate(outputs) if out.numel() == 0]
    if not empty:
        return
    zero = [
        f"input {index}: {describe_inputs([value])}"
        for index, value in enumerate(inputs)
        if isinstance(value, torch.Tensor) and value.numel() == 0
    ]
    output = f"the forward's output {empty[0]} is empty ({describe_inputs([outputs[empty[0]]])})"
    if zero:
        raise UserError(
            f"zero-size input ({'; '.join(zero)}): {output}, nothing to compute or check",
            where=inputs_where,
            fix="give the input factory non-empty shapes (no dimension of size 0)",
        )
    raise UserError(
        f"{output}: nothing to compute or check",
        where=where,
        fix="return outputs with elements from forward, on the inputs the input factory returns",
    )
