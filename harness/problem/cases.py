"""What verification cases are made of: the reference module built for a seed, its perturbed
parameters, the inputs for a seed, and a case's inputs from its spec (the extra cases' are
derived by ``harness.problem.variants``).

Every function here runs the user's code (their module's constructor, their input factory) or
draws from a seed: the reference worker calls them to make the cases, the candidate worker to
make the inputs of each timed call. Loading a problem is ``harness.problem.load``.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

import torch

from harness.capture.records import ArgSpec
from harness.errors import UserError
from harness.problem.load import DTYPES
from harness.problem.uninitialized import built
from harness.problem.user_code import call_user, import_source, init_arguments, reference_class
from harness.problem.variants import resized_inputs, scaled_inputs, strided_inputs
from harness.records import Problem
from harness.sandbox.jobs import CaseSpec
from harness.sandbox.memory import is_out_of_memory, ran_out


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
        if is_out_of_memory(err):
            raise UserError(
                f"constructing {problem.class_name}(*{args!r}, **{kwargs!r}) {ran_out(err)}",
                where=str(problem.source_path),
                fix="construct it with smaller sizes (get_init_inputs() or init_args/init_kwargs "
                "in [tool.kernelpilot]), or raise the limit",
            ) from err
        raise UserError(
            f"constructing {problem.class_name}(*{args!r}, **{kwargs!r}) raised "
            f"{type(err).__name__}: {err}",
            where=str(problem.source_path),
            fix="check get_init_inputs() or init_args/init_kwargs in [tool.kernelpilot]",
        ) from err
    return module.to(device=problem.device, dtype=DTYPES[problem.dtype]).eval()


def _construct(cls, args: list, kwargs: dict, seed: int, device: str) -> torch.nn.Module:
    """Weights the constructor leaves uninitialized are drawn from the seed (``built``)."""
    if device == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device):
                return built(lambda: cls(*args, **kwargs), seed)
        except torch.OutOfMemoryError:
            raise  # not a reason to build it otherwise: other workers may not have run out
        except Exception:  # the same in every worker: each takes the host path below alike
            pass
    torch.manual_seed(seed)
    return built(lambda: cls(*args, **kwargs), seed)


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
    if problem.input_shapes is None and problem.captured_inputs is None:
        fn = getattr(import_source(path, problem.search_paths), problem.inputs_fn or "get_inputs")
    torch.manual_seed(seed)
    with torch.device(problem.device):
        if problem.captured_inputs is not None:
            raw: list = [drawn_like(arg) for arg in problem.captured_inputs]
        elif problem.input_shapes is not None:
            raw = [torch.randn(*shape) for shape in problem.input_shapes]
        else:
            raw = call_user(fn, path)
            _check_inputs(raw, path, problem.inputs_fn or "get_inputs", problem.input_keywords)
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


def drawn_like(arg: ArgSpec):
    """A fresh value like a captured argument: a tensor of its shape and dtype drawn by its
    spec's rule (``TensorSpec.drawing``); a plain value as it was."""
    if arg.tensor is None:
        return arg.value
    spec = arg.tensor
    dtype, rule = getattr(torch, spec.dtype), spec.drawing()
    if rule.kind == "bool":
        return torch.rand(spec.shape) < 0.5
    if rule.kind == "int":
        return torch.randint(int(rule.a), int(rule.b), spec.shape, dtype=dtype)
    drawn = torch.randn(spec.shape) if rule.kind == "normal" else torch.rand(spec.shape)
    return (drawn * rule.a + rule.b).to(dtype)


# What an input factory may return beside tensors: flags, sizes, a mask left out as None.
PLAIN_INPUTS = (int, float, bool, str, type(None))


def _check_inputs(raw, path: Path, fn_name: str, keywords: list[str]) -> None:
    if not isinstance(raw, list | tuple):
        fix = f"return a list of the forward's inputs from {fn_name}()"
        if isinstance(raw, dict):
            fix += (
                ", keyword ones last, and name those in the target's keywords = [...] in "
                "[tool.kernelpilot]"
            )
        raise UserError(
            f"{fn_name}() returned {type(raw).__name__}, not a list", where=str(path), fix=fix
        )
    for index, value in enumerate(raw):
        if not isinstance(value, (torch.Tensor, *PLAIN_INPUTS)):
            raise UserError(
                f"{fn_name}() item {index} is a {type(value).__name__}, not a tensor or a plain "
                "value",
                where=str(path),
                fix=f"return tensors, numbers, strings, booleans or None from {fn_name}()",
            )
    if not any(isinstance(value, torch.Tensor) for value in raw):
        raise UserError(
            f"{fn_name}() returned no tensor",
            where=str(path),
            fix=f"return the forward's tensor inputs from {fn_name}()",
        )
    if len(raw) < len(keywords):
        raise UserError(
            f"{fn_name}() returned {len(raw)} values, fewer than the {len(keywords)} keyword "
            f"arguments named ({', '.join(keywords)})",
            where=str(path),
            fix=f"return the keyword arguments' values last from {fn_name}(), one per name",
        )


def case_inputs(problem: Problem, spec: CaseSpec, strengthened: bool) -> list | None:
    """A case's inputs, drawn again from its seed (None where its kind does not apply)."""
    if spec.kind == "captured":
        call = problem.model_copy(update={"captured_inputs": problem.captured_calls[spec.variant]})
        return make_inputs(call, spec.seed, strengthened)
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
