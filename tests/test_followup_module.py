"""The follow-up's drop-in module, generated for a real verified candidate (the cpu example:
a Linear, a bias and a fused tanh-GELU chain) and imported from a checkout: the kernel runs
where no backward is needed, the original forward (on the drop-in's own parameters) where one
is, the state_dict is the original's, and the generated test file fails on a drop-in without
the fallback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bot.pr.followup import build_followup
from bot.pr.results import TargetSource
from tests.test_publish_policy import results

ROOT = Path(__file__).resolve().parents[1]
MODULE = "models/gelu_block.py"
FALLBACK = "        if not self._kernelpilot_needs_backward(args, kwargs):\n"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """A repository with the user's module and the follow-up's files written into it."""
    root = tmp_path_factory.mktemp("checkout")
    (root / "models").mkdir()
    (root / "tests").mkdir()
    (root / MODULE).write_text((ROOT / "examples/fused_gelu_block.py").read_text())
    data = results()
    target = data.report.targets[0].target
    data.sources = {
        target: TargetSource(
            module_path=MODULE,
            class_name="Model",
            inputs_fn="get_inputs",
            init_fn="get_init_inputs",
        )  # fmt: skip
    }
    followup = build_followup(data, "tests")
    assert followup is not None
    for file in followup.files:
        (root / file.path).write_text(file.content)
    return root


@pytest.fixture
def modules(checkout, monkeypatch):
    """The user's module and the drop-in, imported as the swap-in line imports them."""
    monkeypatch.syspath_prepend(str(checkout))
    for name in ("models", "models.gelu_block", "models.gelu_block_kernelpilot"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    user = importlib.import_module("models.gelu_block")
    dropin = importlib.import_module("models.gelu_block_kernelpilot")
    yield user, dropin
    for name in ("models", "models.gelu_block", "models.gelu_block_kernelpilot"):
        sys.modules.pop(name, None)


def built(user, dropin):
    torch.manual_seed(0)
    original = user.Model(64, 128)
    kernel = dropin.ModelKernelpilot(64, 128)
    kernel.load_state_dict(original.state_dict(), strict=True)
    return original, kernel


def inputs():
    torch.manual_seed(1)
    return torch.randn(16, 64), torch.randn(16, 128)


def test_the_state_dict_and_parameters_are_the_originals(modules):
    user, dropin = modules
    original, kernel = built(*modules)
    assert kernel.state_dict().keys() == original.state_dict().keys()
    assert [name for name, _ in kernel.named_parameters()] == [
        name for name, _ in original.named_parameters()
    ]
    kernel(*(x.requires_grad_() for x in inputs())).sum().backward()  # the original is built
    assert [name for name, _ in kernel.named_modules()] == ["", "linear"]


def test_inference_runs_the_kernel_not_the_original(modules, monkeypatch):
    user, dropin = modules
    original, kernel = built(*modules)
    with torch.no_grad():
        expected = original(*inputs())

    def refused(self, *args):
        raise AssertionError("the original forward ran where no backward is needed")

    monkeypatch.setattr(user.Model, "forward", refused)
    with torch.no_grad():
        torch.testing.assert_close(kernel(*inputs()), expected, rtol=1e-4, atol=1e-4)
    with torch.inference_mode():
        torch.testing.assert_close(kernel(*inputs()), expected, rtol=1e-4, atol=1e-4)
    kernel.requires_grad_(False)  # grad mode on, but nothing requires grad
    torch.testing.assert_close(kernel(*inputs()), expected, rtol=1e-4, atol=1e-4)


def test_training_gets_the_originals_gradients_on_its_own_parameters(modules):
    original, kernel = built(*modules)
    grads = []
    for module in (original, kernel):
        x, residual = (value.requires_grad_() for value in inputs())
        torch.manual_seed(2)
        rng = torch.get_rng_state()
        module(x, residual).pow(2).sum().backward()
        assert torch.equal(torch.get_rng_state(), rng)  # building the original drew nothing
        grads.append([x.grad, residual.grad, *(p.grad for p in module.parameters())])
    for got, want in zip(grads[1], grads[0], strict=True):
        assert got is not None and want is not None
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    # Only the parameters require grad: the fallback still runs, and trains the drop-in's own.
    kernel.zero_grad()
    kernel(*inputs()).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in kernel.parameters())


def _pytest(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_gelu_block_kernelpilot.py"],
        cwd=checkout, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_the_generated_test_passes_and_fails_without_the_fallback(checkout):
    passed = _pytest(checkout)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "2 passed" in passed.stdout
    dropin = checkout / "models/gelu_block_kernelpilot.py"
    text = dropin.read_text()
    assert text.count(FALLBACK) == 1
    dropin.write_text(text.replace(FALLBACK, "        if True:  # no fallback\n"))
    try:
        broken = _pytest(checkout)
    finally:
        dropin.write_text(text)
    assert broken.returncode == 1, broken.stdout[-3000:]
    assert "1 failed, 1 passed" in broken.stdout
    assert "test_model_kernelpilot_trains_like_the_original" in broken.stdout
