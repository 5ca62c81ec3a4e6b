"""What verification cases are made of: the reference module built for a seed, its perturbed
parameters, the inputs for a seed, and inputs of other shapes.

Every function here runs the user's code (their module's constructor, their input factory) or
draws from a seed: the reference worker calls them to make the cases, the candidate worker to
make the inputs of each timed call. Loading a problem is ``harness.problem``.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch

from harness.errors import UserError
from harness.jobs import CaseSpec
from harness.problem import DTYPES, call_user, import_source, init_arguments, reference_class
from harness.records import Problem


def build_reference(problem: Problem, seed: int) -> torch.nn.Module:
    """The reference module in eval mode, on the problem's device and dtype.

    On cuda it is constructed on the device (``torch.device`` as the default): initializing a
    32768 x 32768 Linear takes 9 s on the host and milliseconds there. Every worker builds it
    the same way from the same seed, so they all hold the same parameters; a constructor that
    cannot run there (it calls ``.numpy()``, say) is built on the host, in every worker alike.
    """
    cls = reference_class(problem)
    args, kwargs = init_arguments(problem)
    try:
        module = _construct(cls, args, kwargs, seed, problem.device)
    except Exception as err:
        raise UserError(
            f"constructing {problem.class_name}(*{args!r}, **{kwargs!r}) raised "
            f"{type(err).__name__}: {err}",
            where=str(problem.source_path),
            fix="check get_init_inputs() or init_args/init_kwargs in [tool.kernelpilot]",
        ) from err
    return module.to(device=problem.device, dtype=DTYPES[problem.dtype]).eval()


def _construct(cls, args: list, kwargs: dict, seed: int, device: str) -> torch.nn.Module:
    if device == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return cls(*args, **kwargs)
        except torch.OutOfMemoryError:
            raise  # not a reason to build it otherwise: other workers may not have run out
        except Exception:  # the same in every worker: each takes the host path below alike
            pass
    torch.manual_seed(seed)
    return cls(*args, **kwargs)


def perturb_parameters(module: torch.nn.Module, seed: int) -> None:
    """Move every float parameter away from its initial value.

    Kernels that skip work which is an identity only at initialization (zero bias, unit norm
    weight) or that regenerate weights from a seed are caught on perturbed parameters.
    """
    generators: dict[torch.device, torch.Generator] = {}
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if not tensor.is_floating_point():
                continue
            # Drawn where the tensor lives: a GB-sized weight's noise drawn on the host took
            # seconds per seed (and the same draw again in every candidate worker).
            if tensor.device not in generators:
                generators[tensor.device] = torch.Generator(tensor.device).manual_seed(seed)
            noise = torch.randn(
                tensor.shape, generator=generators[tensor.device], device=tensor.device
            ).to(tensor)
            if name.endswith("running_var"):
                tensor.mul_(1 + 0.5 * noise.tanh())
            else:
                scale = max(float(tensor.float().pow(2).mean().sqrt()), 0.1) * 0.2
                tensor.add_(noise * scale)


def make_inputs(problem: Problem, seed: int, strengthened: bool = False) -> list:
    """Forward inputs for one seed, on the problem's device and dtype.

    The input factory runs with the problem's device as torch's default device: on a GPU its
    ``torch.randn(...)`` draws there, not on the CPU followed by a copy (for 10^8-element
    inputs that was most of a timed call's cost).
    """
    path = problem.inputs_path or problem.source_path
    if problem.input_shapes is None:
        fn = getattr(import_source(path, problem.search_paths), problem.inputs_fn or "get_inputs")
    torch.manual_seed(seed)
    with torch.device(problem.device):
        if problem.input_shapes is not None:
            raw: list = [torch.randn(*shape) for shape in problem.input_shapes]
        else:
            raw = call_user(fn, path)
            _check_inputs(raw, path, problem.inputs_fn or "get_inputs")
        dtype = DTYPES[problem.dtype]
        inputs = []
        for value in raw:
            if isinstance(value, torch.Tensor):
                value = value.detach()
                if value.is_floating_point():
                    if strengthened:
                        scale = max(float(value.float().pow(2).mean().sqrt()), 1.0)
                        value = torch.randn(value.shape) * scale
                    value = value.to(dtype)
                value = value.to(problem.device).contiguous()
            inputs.append(value)
    return inputs


def resized_inputs(inputs: list, variant: int, seed: int) -> list | None:
    """Inputs of another shape, drawn from the values of ``inputs`` (keeps their distribution).

    Variant 1 changes the leading (batch) dimension to a smaller size of the other parity,
    variant 2 the last one to a larger size by an odd amount (tails of vectorized loops). Both
    sizes are drawn from ``seed``: a kernel cannot be specialised to the variants' shapes
    either. None when the inputs have no such dimension to change.
    """
    tensors = [value for value in inputs if isinstance(value, torch.Tensor) and value.dim() > 0]
    if not tensors:
        return None
    axis = 0 if variant == 1 else -1
    old = tensors[0].shape[axis]
    generator = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> int:  # inclusive
        return int(torch.randint(low, high + 1, (1,), generator=generator))

    if variant == 1:
        # Of the other parity than the original: a kernel (or a fallback) keyed on the size
        # being a multiple of 2, 8 or 64 cannot take the benchmark's path on this case.
        low = max(1, old // 4)
        new = 2 if old <= 1 else draw(low, old - 1)
        if (old - new) % 2 == 0:
            new = new - 1 if new - 1 >= low else new + 1
    else:
        new = old + 2 * draw(0, 7) + 1 if old > 1 else 0
    if new in (0, old):
        return None
    resized = []
    picker: torch.Generator | None = None
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[axis] == old:
            shape = list(value.shape)
            shape[axis] = new
            flat = value.flatten()
            # The picks are drawn on the tensor's device: for 10^9 elements a host draw
            # and its copy took seconds per case.
            if picker is None:
                picker = torch.Generator(flat.device).manual_seed(seed)
            value = _picked(flat, int(torch.Size(shape).numel()), picker).reshape(shape)
        resized.append(value)
    return resized


PICK_BLOCK = 256  # contiguous elements per random pick


def _picked(flat: torch.Tensor, count: int, picker: torch.Generator) -> torch.Tensor:
    """``count`` elements of ``flat`` drawn at random (with replacement) in runs of up to
    ``PICK_BLOCK`` neighbours, each run from a random start. One pick per element took an
    int64 index twice a float32 input's size beside it (16 GiB for KernelBench's 8 GiB
    inputs) and, on the device, a scattered read of every element; runs of 256 need an index
    1/128 of the input's size and read whole cache lines. A run is at most 1/64 of a small
    input, so its values still come from all over it."""
    block = max(1, min(PICK_BLOCK, flat.numel() // 64))
    runs = flat.unfold(0, block, 1)  # row i: flat[i : i + block], a view
    picked = torch.empty(count, dtype=flat.dtype, device=flat.device)
    whole = count // block * block
    starts = torch.randint(
        runs.shape[0], (-(-count // block),), generator=picker, device=flat.device
    )
    torch.index_select(runs, 0, starts[: whole // block], out=picked[:whole].view(-1, block))
    if whole < count:
        picked[whole:] = runs[starts[-1]][: count - whole]
    return picked


def _check_inputs(raw, path: Path, fn_name: str) -> None:
    if not isinstance(raw, list | tuple):
        raise UserError(
            f"{fn_name}() returned {type(raw).__name__}, not a list",
            where=str(path),
            fix=f"return a list of tensors from {fn_name}()",
        )
    for index, value in enumerate(raw):
        if not isinstance(value, torch.Tensor | int | float | bool):
            raise UserError(
                f"{fn_name}() item {index} is a {type(value).__name__}, not a tensor or number",
                where=str(path),
                fix=f"return only tensors (and plain numbers) from {fn_name}()",
            )
    if not any(isinstance(value, torch.Tensor) for value in raw):
        raise UserError(
            f"{fn_name}() returned no tensor",
            where=str(path),
            fix=f"return the forward's tensor inputs from {fn_name}()",
        )


def strided_inputs(inputs: list) -> list | None:
    """The same values in other memory layouts, as callers upstream hand them over (a
    transposed activation, a slice): tensors of 2+ dims stored with their last two dimensions
    swapped (column-major), 1-dim tensors as every other element of a buffer twice as long.

    A kernel that reads ``data_ptr()`` as if the input were contiguous reads the wrong
    elements, or the guard poison the candidate worker leaves in the gaps. None when no input
    is a tensor with more than one element.
    """
    laid_out, changed = [], False
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.dim() > 0 and value.numel() > 1:
            if value.dim() >= 2 and value.shape[-1] > 1 and value.shape[-2] > 1:
                value = value.transpose(-1, -2).contiguous().transpose(-1, -2)
            else:
                wide = torch.empty(
                    (*value.shape[:-1], 2 * value.shape[-1]),
                    dtype=value.dtype,
                    device=value.device,
                )
                value = wide[..., ::2].copy_(value)
            changed = True
        laid_out.append(value)
    return laid_out if changed else None


def copy_with_layout(
    tensor: torch.Tensor, device: str | torch.device, fill: float | int | bool = 0, margin: int = 0
) -> torch.Tensor:
    """A copy of ``tensor`` on ``device`` with the same strides, in a storage that holds
    ``fill`` in the gaps between elements and in ``margin`` elements before and after.

    ``.to(device)`` and ``.cpu()`` keep a transposed layout but make a gapped one (a slice with
    a step) contiguous. An expanded tensor (a stride of 0) becomes contiguous: its elements
    share memory, which no copy can write.
    """
    return layout_like(tensor, device, fill, margin).copy_(tensor)


def layout_like(
    tensor: torch.Tensor, device: str | torch.device, fill: float | int | bool, margin: int
) -> torch.Tensor:
    """An uninitialized-looking tensor laid out as ``copy_with_layout`` lays ``tensor`` out,
    holding ``fill`` everywhere."""
    expanded = any(s == 0 and n > 1 for s, n in zip(tensor.stride(), tensor.shape, strict=True))
    strides = torch.empty(tensor.shape, device="meta").stride() if expanded else tensor.stride()
    span = 1 + sum((n - 1) * s for n, s in zip(tensor.shape, strides, strict=True))
    storage = torch.full(
        (2 * margin + (span if tensor.numel() else 0),), fill, dtype=tensor.dtype, device=device
    )
    return storage.as_strided(tensor.shape, strides, margin)


def scaled_inputs(inputs: list, seed: int) -> list:
    """``inputs`` with float tensors scaled 4-16x (the factor drawn from ``seed``).

    randn's values lie within about +-4: a kernel whose approximation (a truncated series, a
    clamped table, a fast exp that overflows) holds only there passes every other case.
    """
    scale = wide_scale(seed)
    return [
        x * scale if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs
    ]


def wide_scale(seed: int) -> float:
    """The factor of the wide-range case, drawn from ``seed``: 4 to 16."""
    generator = torch.Generator().manual_seed(seed)
    return 4.0 + 12.0 * float(torch.rand((), generator=generator))


def case_inputs(problem: Problem, spec: CaseSpec, strengthened: bool) -> list | None:
    """A case's inputs, drawn again from its seed (None where its kind does not apply)."""
    inputs = make_inputs(problem, spec.seed, strengthened)
    if spec.kind in ("seed", "repeat"):
        return inputs
    if spec.kind == "variant":
        return resized_inputs(inputs, spec.variant, spec.seed + spec.variant)
    if spec.kind == "wide":
        return scaled_inputs(inputs, spec.seed)
    return strided_inputs(inputs)


def case_module(base: torch.nn.Module, spec: CaseSpec) -> torch.nn.Module:
    """The reference with the case's parameters: ``base`` itself, or a perturbed copy."""
    if spec.params_seed is None:
        return base
    module = copy.deepcopy(base)
    perturb_parameters(module, spec.params_seed)
    return module


DIGEST_SAMPLE = 4096


def params_digest(module: torch.nn.Module) -> str:
    """A digest of a module's parameters and buffers (as ``input_digest`` samples them): every
    worker builds the reference again and must get the reference worker's."""
    return input_digest(list(module.state_dict().values()))


def check_params(module: torch.nn.Module, expected: str, problem: Problem) -> None:
    """Raise a UserError when ``module`` was built with other parameters than the reference
    worker's (``expected``; empty: nothing to check)."""
    if expected and params_digest(module) != expected:
        raise UserError(
            "constructing the module gave other parameters in another worker for the same "
            "seed: every worker builds it again and must get the same",
            where=f"{problem.source_path}:{problem.class_name}.__init__",
            fix="draw every random value in __init__ with torch (seeded by the harness), not "
            "with numpy's or Python's random",
        )


def input_digest(inputs: list) -> str:
    """A digest of the inputs: shapes, strides, dtypes, and the exact values of a sample spread
    over each tensor (a full read of GBs per case would cost more than drawing them)."""
    digest = hashlib.sha256()
    for value in inputs:
        if not isinstance(value, torch.Tensor):
            digest.update(repr(value).encode())
            continue
        digest.update(repr((tuple(value.shape), value.stride(), str(value.dtype))).encode())
        count = value.numel()
        if count:
            step = max(1, -(-count // DIGEST_SAMPLE))
            index = torch.arange(0, count, step, device=value.device)
            taken = torch.take(value.detach(), index).cpu().contiguous()
            digest.update(bytes(taken.view(torch.uint8).tolist()))
    return digest.hexdigest()
