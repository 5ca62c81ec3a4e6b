"""The reference's forward as the workers take it: its result as a list of tensors, whether
it is finite, its outputs on the host, a line describing its inputs, and the errors that are
the user's to fix (outputs that are not finite, a forward that does not fit the device).

The reference worker, the comparator's and the baseline's use them alike.
"""

from __future__ import annotations

import torch

from harness.errors import UserError
from harness.input_variants import copy_with_layout
from harness.jobs import WorkerJob


def as_outputs(value, where: str) -> list[torch.Tensor]:
    """A forward's result as a list of tensors."""
    if isinstance(value, torch.Tensor):
        return [value]
    if (
        isinstance(value, list | tuple)
        and value
        and all(isinstance(v, torch.Tensor) for v in value)
    ):
        return list(value)
    raise UserError(
        f"forward returned {type(value).__name__}, not a tensor or a tuple of tensors",
        where=where,
        fix="return tensors from forward",
    )


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


def out_of_memory(problem, inputs: list, case: str) -> UserError:
    """The device ran out running the reference on one case: what it held, what was free."""
    held = sum(tensor_bytes(x) for x in inputs)
    free, total = torch.cuda.mem_get_info() if problem.device == "cuda" else (0, 0)
    memory = f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB" if total else "host memory"
    step = (
        f"the forward (its inputs alone take {held / 2**30:.2f} GiB)"
        if inputs
        else "drawing inputs"
    )
    return UserError(
        f"the reference ran out of device memory on the case '{case}' in {step}; {memory}; "
        "the harness holds one case at a time",
        where=f"{problem.inputs_path or problem.source_path}: {problem.inputs_fn or 'inputs'}()",
        fix="shrink the input shapes the input factory returns (or the module's sizes) until "
        "one forward fits on the device",
    )
