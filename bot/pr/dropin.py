"""The text of the follow-up's drop-in module and of its test file (pure: text in, text out).

The verified kernel has no backward: inside a network being trained, the gradients of its
inputs and parameters would silently stay None. So the drop-in class ``<Class>Kernelpilot``
subclasses the verified ``ModelNew`` (its parameters, buffers and ``state_dict`` are the
kernel's) and runs the kernel only where no backward is needed; where one is (grad mode on and
an input or a parameter requires grad) it runs the original class's forward, imported from the
user's module, on its own parameters and buffers (``torch.func.functional_call``), so autograd
works as before. The original is built on first need with the same constructor arguments and
kept out of the submodules. The verified kernel stays in a file of its own, byte for byte what
was verified: the gates and the nightly check that file, and the drop-in is our text alone.

The test file compares the drop-in with the original under ``torch.no_grad()`` and over two
SGD steps in training (outputs, input gradients, parameter gradients).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from bot.pr.results import TargetSource
from harness.judge.tolerance import tolerance_for


def dropin_module(source: TargetSource, verified_path: PurePosixPath, header: list[str]) -> str:
    """The drop-in module beside the user's: ``header`` (comment lines), then the class."""
    cls = source.class_name
    original = PurePosixPath(source.module_path).stem
    return (
        "\n".join(header)
        + f'''
import importlib

import torch


def _sibling(stem):
    """A module beside this file: in its package when this file was imported as part of one."""
    if __package__:
        return importlib.import_module("." + stem, __package__)
    return importlib.import_module(stem)


def _leaves(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _leaves(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    else:
        yield value


ModelNew = _sibling({verified_path.stem!r}).ModelNew


class {cls}Kernelpilot(ModelNew):
    """The verified kernel where no backward is needed; the original {cls}.forward, on this
    module's parameters and buffers, where one is."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._kernelpilot_arguments = (args, kwargs)
        self._kernelpilot_original = None

    def forward(self, *args, **kwargs):
        if not self._kernelpilot_needs_backward(args, kwargs):
            return super().forward(*args, **kwargs)
        original = self._kernelpilot_reference()
        state = {{**dict(self.named_parameters()), **dict(self.named_buffers())}}
        return torch.func.functional_call(original, state, args, kwargs)

    def _kernelpilot_needs_backward(self, args, kwargs):
        if not torch.is_grad_enabled():
            return False
        if any(parameter.requires_grad for parameter in self.parameters()):
            return True
        return any(
            isinstance(value, torch.Tensor) and value.requires_grad
            for value in _leaves([args, kwargs])
        )

    def _kernelpilot_reference(self):
        """The original {cls}, built once with this module's constructor arguments (on the cpu,
        without touching the random stream) and not registered as a submodule: its own
        parameters are never used, functional_call swaps in this module's. Its train/eval
        modes follow this module's, submodule by submodule."""
        if self._kernelpilot_original is None:
            args, kwargs = self._kernelpilot_arguments
            with torch.random.fork_rng(devices=[]):
                built = getattr(_sibling({original!r}), {cls!r})(*args, **kwargs)
            object.__setattr__(self, "_kernelpilot_original", built)
        modes = dict(self.named_modules())
        for name, module in self._kernelpilot_original.named_modules():
            module.training = modes.get(name, self).training
        return self._kernelpilot_original
'''
    )


def test_module(source: TargetSource, kernel_path: PurePosixPath, test_path: PurePosixPath) -> str:
    """The pytest file that checks the drop-in at ``kernel_path`` against the original."""
    cls = source.class_name
    tolerance = tolerance_for(source.dtype, source.atol, source.rtol)
    depth = len(test_path.parts) - 1
    if source.init_fn:
        init = f"    init_args, init_kwargs = list(original.{source.init_fn}()), {{}}"
    else:
        init = f"    init_args, init_kwargs = {source.init_args!r}, {source.init_kwargs!r}"
    if source.inputs_fn:
        factory_file = source.inputs_path or source.module_path
        inputs = (
            f"list(_load({factory_file!r}).{source.inputs_fn}())"
            if factory_file != source.module_path
            else f"list(original.{source.inputs_fn}())"
        )
    else:
        inputs = f"[torch.randn(shape) for shape in {source.input_shapes!r}]"
    name = re.sub(r"\W", "_", f"{cls}_kernelpilot").lower()
    return f'''"""kernelpilot: {cls}Kernelpilot against the original {cls}."""

import importlib.util
import pathlib
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[{depth}]
DEVICE = {source.device!r}
DTYPE = torch.{source.dtype}
RTOL, ATOL = {tolerance.rtol!r}, {tolerance.atol!r}  # atol is relative to the output's RMS
ON_DEVICE = pytest.mark.skipif(
    DEVICE == "cuda" and not torch.cuda.is_available(), reason="verified on a CUDA GPU"
)


def _load(relative):
    path = ROOT / relative
    for folder in (str(ROOT), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location("kp_" + path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _place(value):
    if isinstance(value, torch.Tensor):
        return value.to(DEVICE, DTYPE) if value.is_floating_point() else value.to(DEVICE)
    return value


def _outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _close(got, want):
    scale = want.double().pow(2).mean().sqrt().item() if want.numel() else 1.0
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL * max(scale, 1e-30))


def _modules():
    """The original module, built as configured, and the drop-in loaded with its state."""
    original = _load({source.module_path!r})
    kernel = _load({str(kernel_path)!r})
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
            expected = _outputs(reference(*inputs))
            actual = _outputs(candidate(*inputs))
        assert len(actual) == len(expected)
        for got, want in zip(actual, expected):
            _close(got, want)


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
    outputs = _outputs(module(*leaves))
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
'''
