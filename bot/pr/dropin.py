"""The text of the follow-up's drop-in module, of the runtime the drop-ins share, and of the
drop-in's test file (pure: text in, text out).

The verified kernel has no backward, and its file compiles the kernel when imported. So the
drop-in class ``<Class>Kernelpilot`` subclasses the user's class (the same constructor,
parameters, buffers and ``state_dict``; importing it builds nothing) and runs the verified
``ModelNew`` only where it was verified: no backward needed, its device and dtype, autocast off.
Where a backward is needed (grad mode on and an input or a parameter requires grad) the user's
own forward runs, so autograd works as before. The kernel is built on the first forward that
runs it, or ahead of time (``python -m <package>.<module>_kernelpilot --build``), and cached by
content hash per machine: later processes load it with no compiler or ninja. Where it cannot be
built or loaded, one warning, and the user's forward.

That code is the same for every drop-in: ``bot.pr.shipped`` holds it as real modules
(``kernel_cache``: the cache; ``kernel_dropin``: the class and the build), joined here into one
runtime file beside the drop-ins, ``kernelpilot_runtime_<hash>.py``. Its name is its content's
hash: a drop-in imports the code it was shipped with, whatever a later kernelpilot ships beside
it, and drop-ins in one folder share one copy. The drop-in itself is short: what is particular
to its target. The verified kernel stays in a file of its own, byte for byte what was verified:
the gates and the nightly check that file, and the drop-in and the runtime are our text alone.

The test file builds the kernel (a test that ran the original forward would prove nothing),
compares the drop-in with the original under ``torch.no_grad()`` and checks that the kernel
ran, then over two SGD steps in training (outputs, input gradients, parameter gradients) checks
that it did not.
"""

from __future__ import annotations

import ast
import hashlib
import re
from functools import cache
from pathlib import Path, PurePosixPath

from bot.pr.results import TargetSource
from harness.capture.freeze import tensor_source
from harness.judge.tolerance import tolerance_for

SHIPPED = Path(__file__).parent / "shipped"
SHIPPED_MODULES = ("kernel_cache.py", "kernel_dropin.py")
IMPORTS_MARK = "# kernelpilot: shipped imports\n"
CODE_MARK = "# kernelpilot: shipped code\n"
RUNTIME_PREFIX = "kernelpilot_runtime_"


def dropin_module(source: TargetSource, verified_path: PurePosixPath, header: list[str]) -> str:
    """The drop-in module beside the user's: ``header`` (comment lines), then the class."""
    cls = source.class_name
    original = PurePosixPath(source.module_path).stem
    kernel = verified_path.with_name(
        verified_path.name.replace("_verified_kernelpilot", "_kernelpilot")
    )
    dotted = str(kernel.with_suffix("")).replace("/", ".")
    init = _init_arguments(source, f"_sibling({original!r})")
    init_imports = "".join(f"        {line}\n" for line in source.init_imports)
    runtime, _ = runtime_module()
    return (
        "\n".join(header)
        + f'''
import importlib
import sys

import torch


def _name(stem):
    """The importable name of a module beside this file: in its package, if it is in one."""
    return f"{{__package__}}.{{stem}}" if __package__ else stem


def _sibling(stem):
    return importlib.import_module(_name(stem))


_runtime = _sibling({runtime!r})  # what every kernelpilot drop-in shares
KernelUnavailableWarning = _runtime.KernelUnavailableWarning


class {cls}Kernelpilot(_runtime.KernelpilotDropin, _sibling({original!r}).{cls}):
    """{cls}, with the verified kernel of {verified_path.name} where it was verified."""

    _kernelpilot_verified = _name({verified_path.stem!r})
    _kernelpilot_dotted = __spec__.name if __spec__ else __name__
    _kernelpilot_device = {source.device!r}
    _kernelpilot_dtype = torch.{source.dtype}

    @staticmethod
    def _kernelpilot_init():
        """The constructor arguments it was verified with: what build() builds it with."""
{init_imports}        return {init}


def build():
    """Build the kernel into this machine's cache, or find it there, as `python -m
    {dotted} --build` does: the cache folders. Raises what stopped it."""
    return _runtime.build({cls}Kernelpilot)


if __name__ == "__main__":
    sys.exit(_runtime.main({cls}Kernelpilot, sys.argv[1:]))
'''
    )


@cache
def runtime_module() -> tuple[str, str]:
    """The runtime the drop-ins import: its module name (from its content's hash) and text."""
    imports: list[str] = []
    bodies = []
    for name in SHIPPED_MODULES:
        text = (SHIPPED / name).read_text()
        head, body = text.split(IMPORTS_MARK, 1)[1].split(CODE_MARK, 1)
        imports += _shipped_imports(head)
        bodies.append(body.strip("\n"))
    code = _import_block(imports) + "\n\n" + "\n\n\n".join(bodies) + "\n"
    name = RUNTIME_PREFIX + hashlib.sha256(code.encode()).hexdigest()[:12]
    header = [
        f"# {name}: what kernelpilot's drop-ins beside it share (bot/pr/shipped in kernelpilot): "
        "the build cache of their kernels, and the class that runs a kernel where it was verified "
        "and the original forward elsewhere.",
        "# Its name is its content's hash: each drop-in imports the code it was shipped with. "
        "It needs torch and the standard library alone.",
        "",
    ]
    return name, "\n".join(header) + code


def _shipped_imports(head: str) -> list[str]:
    """A shipped module's import lines, less its imports of the other shipped modules (the
    runtime holds them)."""
    lines, skipping = [], False
    for line in head.splitlines():
        if line.startswith("from bot."):
            skipping = line.rstrip().endswith("(")
        elif skipping:
            skipping = not line.startswith(")")
        elif line.strip():
            lines.append(line)
    return lines


def _import_block(lines: list[str]) -> str:
    """One block, ordered as isort orders it: the future, the standard library, then torch."""
    unique = list(dict.fromkeys(lines))
    future = [line for line in unique if line.startswith("from __future__")]
    torch = [line for line in unique if line.split()[1].split(".")[0] == "torch"]
    standard = sorted(
        (line for line in unique if line not in future and line not in torch),
        key=lambda line: (line.startswith("from"), line.split()[1]),
    )
    return "\n\n".join("\n".join(group) for group in (future, standard, sorted(torch)) if group)


def _init_arguments(source: TargetSource, module: str) -> str:
    """The constructor's arguments as configured or captured, an expression over ``module``
    (the user's)."""
    if source.init_call is not None:
        expression = ast.parse(source.init_call, mode="eval").body
        if isinstance(expression, ast.Dict):
            return f"[], {source.init_call}"
        return f"list({source.init_call}), {{}}"
    if source.init_fn:
        return f"list({module}.{source.init_fn}()), {{}}"
    return f"{source.init_args!r}, {source.init_kwargs!r}"


def _inputs(source: TargetSource) -> str:
    """An expression for one call's inputs (drawn after the test seeds torch)."""
    if source.captured_inputs is not None:
        values = [
            tensor_source(arg.tensor) if arg.tensor is not None else repr(arg.value)
            for arg in source.captured_inputs
        ]
        return f"[{', '.join(values)}]"
    if source.inputs_fn:
        factory_file = source.inputs_path or source.module_path
        if factory_file != source.module_path:
            return f"list(_load({factory_file!r}).{source.inputs_fn}())"
        return f"list(original.{source.inputs_fn}())"
    return f"[torch.randn(shape) for shape in {source.input_shapes!r}]"


def test_module(source: TargetSource, kernel_path: PurePosixPath, test_path: PurePosixPath) -> str:
    """The pytest file that checks the drop-in at ``kernel_path`` against the original."""
    cls = source.class_name
    tolerance = tolerance_for(source.dtype, source.atol, source.rtol)
    depth = len(test_path.parts) - 1
    imports = "".join(f"    {line}\n" for line in source.init_imports)
    init = f"{imports}    init_args, init_kwargs = {_init_arguments(source, 'original')}"
    inputs = _inputs(source)
    name = re.sub(r"\W", "_", f"{cls}_kernelpilot").lower()
    return f'''"""kernelpilot: {cls}Kernelpilot against the original {cls}."""

import dataclasses
import importlib
import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[{depth}]
KEYWORDS = {tuple(source.input_keywords)!r}
DEVICE = {source.device!r}
DTYPE = torch.{source.dtype}
RTOL, ATOL = {tolerance.rtol!r}, {tolerance.atol!r}  # atol is relative to the output's RMS
ON_DEVICE = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="verified on a CUDA GPU"
)


def _load(relative):
    """A file of the repository, imported as the repository imports it: by its dotted name
    where it is in a package (its relative imports work), else by its path."""
    path = ROOT / relative
    folder, parts = path.parent, [path.stem]
    while folder != ROOT and (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    for entry in (str(ROOT), str(folder)):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    if len(parts) > 1:
        return importlib.import_module(".".join(parts))
    spec = importlib.util.spec_from_file_location("kp_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _call(module, inputs):
    """The forward called as it was verified: the last len(KEYWORDS) inputs by name."""
    count = len(KEYWORDS)
    if not count:
        return module(*inputs)
    return module(*inputs[:-count], **dict(zip(KEYWORDS, inputs[-count:])))


def _place(value):
    if isinstance(value, torch.Tensor):
        return value.to(DEVICE, DTYPE) if value.is_floating_point() else value.to(DEVICE)
    return value


def _outputs(value):
    """The result's tensors in order; the rest of it (None, numbers, the nest) in ``_form``."""
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, field.name) for field in dataclasses.fields(value)]
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _outputs(item)]
    return []


def _form(value):
    if isinstance(value, torch.Tensor):
        return "T"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [type(value).__name__] + [_form(getattr(value, f.name)) for f in dataclasses.fields(value)]
    if isinstance(value, dict):
        return [type(value).__name__] + [(key, _form(item)) for key, item in value.items()]
    if isinstance(value, (tuple, list)):
        return [type(value).__name__] + [_form(item) for item in value]
    return repr(value)


def _close(got, want):
    scale = want.double().pow(2).mean().sqrt().item() if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * max(scale, 1e-30))


def _modules():
    """The original module, built as configured, and the drop-in loaded with its state. The
    kernel is built first (or found in this machine's cache): a test that ran the original
    forward in its place would prove nothing."""
    original = _load({source.module_path!r})
    kernel = _load({str(kernel_path)!r})
    kernel.build()
{init}
    reference = original.{cls}(*init_args, **init_kwargs).to(DEVICE, DTYPE)
    candidate = kernel.{cls}Kernelpilot(*init_args, **init_kwargs).to(DEVICE, DTYPE)
    candidate.load_state_dict(reference.state_dict(), strict=True)
    return original, reference, candidate


@ON_DEVICE
def test_{name}_matches_the_original():
    original, reference, candidate = _modules()
    reference.eval()
    candidate.eval()
    for seed in (0, 1, 2):
        torch.manual_seed(seed)
        inputs = [_place(value) for value in {inputs}]
        with torch.no_grad():
            expected_value, actual_value = _call(reference, inputs), _call(candidate, inputs)
        assert _form(actual_value) == _form(expected_value)
        expected, actual = _outputs(expected_value), _outputs(actual_value)
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            _close(got, want)
    assert "_kernelpilot_links" in candidate.__dict__, "the kernel did not run"


def _step(module, optimizer, inputs, seed):
    """One SGD step on a weighted sum of the outputs: the outputs and the gradients."""
    leaves = [
        value.detach().clone().requires_grad_(True)
        if isinstance(value, torch.Tensor) and value.is_floating_point()
        else value
        for value in inputs
    ]
    optimizer.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks, if any
    outputs = _outputs(_call(module, leaves))
    weights = torch.Generator().manual_seed(seed)
    loss = sum(
        (out.double() * torch.randn(out.shape, generator=weights, dtype=torch.float64).to(DEVICE))
        .sum()
        for out in outputs
        if isinstance(out, torch.Tensor) and out.is_floating_point()
    )
    loss.backward()
    optimizer.step()
    inputs_grad = [leaf.grad for leaf in leaves if isinstance(leaf, torch.Tensor)]
    params_grad = {{name: p.grad for name, p in module.named_parameters()}}
    return outputs, inputs_grad, params_grad


@ON_DEVICE
def test_{name}_trains_like_the_original():
    original, reference, candidate = _modules()
    reference.train()
    candidate.train()
    sgd = [torch.optim.SGD(m.parameters(), lr=0.01) for m in (reference, candidate)]
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs = [_place(value) for value in {inputs}]
        want = _step(reference, sgd[0], inputs, seed)
        got = _step(candidate, sgd[1], inputs, seed)
        assert len(got[0]) == len(want[0]) and len(got[1]) == len(want[1])
        for got_out, want_out in zip(got[0], want[0]):
            _close(got_out, want_out)
        for got_grad, want_grad in zip(got[1], want[1]):
            assert (got_grad is None) == (want_grad is None)
            if want_grad is not None:
                _close(got_grad, want_grad)
        assert got[2].keys() == want[2].keys()
        for key, want_grad in want[2].items():
            assert (got[2][key] is None) == (want_grad is None), key
            if want_grad is not None:
                _close(got[2][key], want_grad)
    assert "_kernelpilot_links" not in candidate.__dict__, "the kernel ran in training"
'''
