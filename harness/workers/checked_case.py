"""One checked call of a candidate in the checks' worker: a case's inputs produced (on a busy
stream, over poisoned memory, between guard regions), the call profiled, its outputs checked
before anything else reads them; the comparison itself is the parent's or the comparator's."""

from __future__ import annotations

import traceback
from typing import NamedTuple

import torch
from torch.profiler import ProfilerActivity

from harness.builds.cache import CachedLoader
from harness.problem.cases import case_inputs, input_digest
from harness.records import Check, Status
from harness.sandbox.jobs import CaseSpec, CheckFailed, WorkerJob
from harness.workers import guards, profiling, streams
from harness.workers.calls import NotAnOutput, bound, describe_form, leaves
from harness.workers.stream_hold import StreamGate


def pass_once(checks: list[Check], name: str, detail: str) -> None:
    if not any(check.name == name for check in checks):
        checks.append(Check(name=name, passed=True, detail=detail))


def run_case(
    job: WorkerJob,
    model,
    loader: CachedLoader,
    spec: CaseSpec,
    reference: torch.nn.Module,
    checks: list[Check],
    gate: StreamGate | None = None,
    hold_limit_s: float = 0.0,
) -> list:
    """One checked call; on a busy stream with ``gate``, work on other streams is held until
    the harness has read the outputs (``harness.workers.stream_hold``): the caller's stream, its joins
    let go, has ``hold_limit_s`` after the inputs are ready to finish the call and the reads."""
    try:
        model.load_state_dict(reference.state_dict(), strict=True)
    except Exception as err:
        raise CheckFailed(
            Status.runtime_error, "state_dict_strict", f"load_state_dict(strict=True): {err}"
        ) from err
    pass_once(checks, "state_dict_strict", "loads the reference's parameters")
    staged = _stage(job, spec)
    loader.calls.clear()
    call = _call(
        bound(model, job.problem.input_keywords),
        staged,
        spec,
        job.problem.device,
        gate,
        hold_limit_s,
    )
    _check_after(job, loader, spec, staged, call, checks, gate is not None)
    return call.outputs


def _stage(job: WorkerJob, spec: CaseSpec) -> streams.Staged:
    """The case's inputs, drawn again here and checked against the reference worker's draw,
    staged to be produced at the call (on a busy stream for ``spec.async_stream``); the memory
    they and the outputs will be allocated from holds the case's poison."""
    device = job.problem.device
    raw = case_inputs(job.problem, spec, job.strengthened)
    if raw is None or input_digest(raw) != spec.input_digest:
        raise CheckFailed(
            Status.rejected,
            "no_monkeypatching",
            f"{spec.name}: the inputs drawn in the candidate's process differ from the "
            "reference worker's draw for the same seed (random number generation disturbed)",
        )
    staged = streams.Staged(raw, device, spec.async_stream)
    fill = poison_fill(spec)
    for value in raw:  # freed next: memory handed out again holds the poison, not inputs
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            value.fill_(fill)
    del raw
    with staged.current_stream():  # blocks freed on the stream the candidate allocates on
        guards.poison_memory(spec.output_meta, device, fill)
    return staged


class _Called(NamedTuple):
    """A checked call: its inputs and outputs, what the outputs held at return (the harness's
    first read, queued right after the call on the caller's stream) and the ops it ran."""

    inputs: list
    outputs: list[torch.Tensor]
    at_return: guards.AtReturn
    ops: list[str]


def _call(
    model,
    staged: streams.Staged,
    spec: CaseSpec,
    device: str,
    gate: StreamGate | None,
    hold_limit_s: float,
) -> _Called:
    """The candidate's call on the staged inputs, profiled, with other streams held until the
    harness's first read of the outputs where there is a gate."""
    # Every checked call is profiled (CPU ops only: that adds no synchronization), so a
    # PyTorch fallback taken on some shapes or seeds only is seen too.
    with (
        torch.no_grad(),
        staged.current_stream(),
        torch.profiler.profile(activities=[ProfilerActivity.CPU]) as prof,
    ):
        inputs = staged.produce()  # on a busy stream: not there yet for a kernel that skips it
        with staged.held(gate, hold_limit_s) as hold:
            caller = torch.cuda.current_stream() if device == "cuda" else None
            try:
                with torch.profiler.record_function(profiling.FORWARD_RANGE):
                    result = model(*inputs)
            except Exception as err:
                raise CheckFailed(
                    Status.runtime_error,
                    "runs",
                    f"{spec.name}: {type(err).__name__}: {err}",
                    traceback.format_exc(),
                ) from err
            if hold:
                hold.forward_returned()
            if caller is not None and torch.cuda.current_stream() != caller:
                raise CheckFailed(
                    Status.incorrect,
                    "stream_ordered",
                    f"{spec.name}: forward returned with another stream current than its "
                    f"caller's: {streams.STREAM_HINT}",
                )
            outputs = _plain_tensors(result, spec)
            # Before anything else reads them, on the same stream; other streams' work waits.
            at_return = guards.at_return(outputs, hold.wait_then_release if hold else None)
    return _Called(inputs, outputs, at_return, profiling.forward_ops(prof))


def _plain_tensors(result, spec: CaseSpec) -> list[torch.Tensor]:
    """The result's tensors: in the reference's form (the same nest, the same values beside the
    tensors), and each a plain tensor."""
    try:
        outputs, form = leaves(result)
    except NotAnOutput as err:
        raise CheckFailed(
            Status.rejected, "plain_tensor_outputs", f"{spec.name}: the result holds {err}"
        ) from None
    if form != spec.output_form:
        raise CheckFailed(
            Status.incorrect,
            "output_form",
            f"{spec.name}: returned {describe_form(form)} where the reference returns "
            f"{describe_form(spec.output_form)} (T: a tensor)",
        )
    if not all(type(out) is torch.Tensor for out in outputs):
        kinds = ", ".join(type(out).__name__ for out in outputs)
        raise CheckFailed(
            Status.rejected, "plain_tensor_outputs", f"outputs are {kinds}, not plain tensors"
        )
    return outputs


def _check_after(
    job: WorkerJob,
    loader: CachedLoader,
    spec: CaseSpec,
    staged: streams.Staged,
    call: _Called,
    checks: list[Check],
    gated: bool,
) -> None:
    """What the call did besides its outputs' values: PyTorch compute, outputs that changed
    after return, its own kernel called, outputs aliasing inputs, inputs modified."""
    device, inputs, outputs = job.problem.device, call.inputs, call.outputs
    computes = profiling.pytorch_compute_problems(call.ops, job.reference_ops)
    if computes:
        raise CheckFailed(Status.rejected, "no_pytorch_compute", f"{spec.name}: {computes}")
    guards.settle(device)
    if guards.changed_since(call.at_return, outputs):
        hint = f": {streams.STREAM_HINT}" if staged.stream is not None else ""
        held = ", held back until the harness had read the outputs" if gated else ""
        raise CheckFailed(
            Status.incorrect,
            "stable_after_sync",
            f"{spec.name}: outputs changed after return (work left running that the caller's "
            f"stream does not wait for{held}){hint}",
        )
    if not sum(loader.calls.values()):
        raise CheckFailed(
            Status.rejected, "launches_own_kernel", "forward never called its compiled kernel"
        )
    for out in outputs:
        if any(isinstance(x, torch.Tensor) and guards.overlaps(out, x) for x in inputs):
            raise CheckFailed(
                Status.incorrect, "no_input_alias", "an output shares memory with an input"
            )
    for position, (now, then) in enumerate(zip(inputs, staged.originals, strict=True)):
        if isinstance(now, torch.Tensor) and not guards.same_values(now, then):
            raise CheckFailed(
                Status.incorrect, "inputs_unchanged", f"input {position} was modified"
            )
    for name, detail in [
        ("plain_tensor_outputs", "outputs are torch.Tensor"),
        ("stable_after_sync", "outputs unchanged after synchronize"),
        ("launches_own_kernel", "its compiled functions are called in every forward"),
        ("no_input_alias", "outputs do not alias inputs"),
        ("inputs_unchanged", "inputs and their guard regions untouched"),
    ]:
        pass_once(checks, name, detail)
    if staged.stream is not None:
        pass_once(
            checks,
            "stream_ordered",
            "right with inputs produced asynchronously on a busy non-default current stream",
        )


def harness_out_of_memory(spec: CaseSpec, device: str, err: torch.OutOfMemoryError) -> CheckFailed:
    """The worker's own work on a case (drawing and staging its inputs, poisoning memory,
    reading the outputs back, handing them over) ran out of device memory: the harness's
    failure, said as such, with what was free and what lowers it."""
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        memory = f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
    else:
        memory = "on the host"
    text = str(err).strip()
    asked = f"; {text.splitlines()[0][:160]}" if text else ""
    return CheckFailed(
        Status.runtime_error,
        "harness_memory",
        f"{spec.name}: the harness ran out of device memory checking this case in the "
        f"candidate's worker ({memory}{asked}): not a fault of the kernel or the module. The "
        "worker holds the case's inputs twice (their values, and the copy the candidate is "
        "called with) and the previous case's outputs beside the candidate's; "
        "eval.shape_variants = 0 and eval.strided_inputs = false drop the largest cases, "
        "smaller inputs from the input factory lower them all",
        traceback.format_exc(),
    )


def poison_fill(spec: CaseSpec) -> float:
    """What freed memory holds before a case: NaN, and other garbage before a repeated case
    (a kernel reading memory it never wrote gets other values there than the first time)."""
    return 3.0 if spec.kind == "repeat" else float("nan")
