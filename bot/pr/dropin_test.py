"""The text of the follow-up's test file (pure: text in, text out): the drop-in against the
original under ``torch.no_grad()`` (the kernel runs) and over two SGD steps in training (the
original runs: outputs, input gradients, parameter gradients), each module built as it was
verified (configured, or its captured constructor call written out) and called as it was
(keyword inputs by name; any nest of outputs compared tensor by tensor, the rest equal).
It builds the kernel first (a test that ran the original forward would prove nothing) and
checks that the kernel ran in inference and did not in training."""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from bot.pr.dropin import init_arguments
from bot.pr.results import TargetSource
from harness.capture.freeze import tensor_source
from harness.judge.tolerance import tolerance_for


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
    init = f"{imports}    init_args, init_kwargs = {init_arguments(source, 'original')}"
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
    """The forward called as it was verified: the last len(KEYWORDS) inputs by name, in
    strict float32 (a module's import, even the kernel's on its first call, may set it)."""
    _strict_float32()
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


# PyTorch's float32 settings (TF32: cuDNN's convolutions by default) would round each module's
# library calls its own way. Called with every one strict (``_call``), the two compute one
# function as precisely as float32 allows.
FLOAT32 = [
    leaf
    for backend in ("cuda", "cudnn", "mkldnn")
    for op in ("matmul", "conv", "rnn")
    if hasattr(leaf := getattr(getattr(torch.backends, backend, None), op, None), "fp32_precision")
]


# A torch without them (before 2.9): the older flags.
LEGACY = [(torch.backends.cudnn, "allow_tf32"), (torch.backends.cuda.matmul, "allow_tf32")]


@pytest.fixture(autouse=True)
def _float32_settings_kept():
    before = [leaf.fp32_precision for leaf in FLOAT32]
    flags = [getattr(where, name) for where, name in LEGACY] if not FLOAT32 else []
    yield
    for leaf, value in zip(FLOAT32, before):
        leaf.fp32_precision = value
    for (where, name), value in zip(LEGACY, flags):
        setattr(where, name, value)


def _strict_float32():
    for leaf in FLOAT32:
        leaf.fp32_precision = "ieee"
    if not FLOAT32:
        for where, name in LEGACY:
            setattr(where, name, False)


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
