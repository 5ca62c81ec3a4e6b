"""The follow-up's drop-in module, generated for a real verified candidate (the cpu example:
a Linear, a bias and a fused tanh-GELU chain) and imported from a checkout: the kernel runs
where no backward is needed, the original forward (on the drop-in's own parameters) where one
is, the state_dict is the original's, and the generated test file fails on a drop-in without
the fallback. And its build: importing the drop-in builds nothing; the kernel is built once per
machine (``--build``) into a cache keyed by content hash, from which a process with no compiler
and no ninja loads it; where it cannot be built or loaded (or its cached library was changed),
one warning and the original forward."""

from __future__ import annotations

import copy
import hashlib
import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from bot.pr.dropin import RUNTIME_PREFIX, runtime_module
from bot.pr.followup import build_followup
from bot.pr.results import TargetSource
from tests.test_publish_policy import results

ROOT = Path(__file__).resolve().parents[1]
MODULE = "models/gelu_block.py"
DROPIN = "models.gelu_block_kernelpilot"
NAMES = ("models", "models.gelu_block", DROPIN, "models.gelu_block_verified_kernelpilot")
FALLBACK = "        if self._kernelpilot_verified_for(args, kwargs):\n"


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


def test_one_runtime_per_folder_named_by_its_content():
    """Drop-ins in one folder share one runtime file; its name is its code's hash, so a drop-in
    keeps importing the code it was shipped with when a later follow-up ships another."""
    data = results()
    row = data.report.targets[0]
    for target in ("models/mlp.py:MLP", "nets/conv.py:Conv"):
        data.report.targets.append(row.model_copy(update={"target": target}))
        path, cls = target.split(":")
        data.sources[target] = TargetSource(module_path=path, class_name=cls, inputs_fn="make")
    followup = build_followup(data, "tests")
    assert followup is not None
    name, text = runtime_module()
    runtimes = {file.path: file.content for file in followup.files if RUNTIME_PREFIX in file.path}
    assert runtimes == {f"models/{name}.py": text, f"nets/{name}.py": text}
    code = text.split("\n", 2)[2]  # after its two header lines
    assert name == RUNTIME_PREFIX + hashlib.sha256(code.encode()).hexdigest()[:12]
    dropins = [file.content for file in followup.files if file.path.endswith("s_kernelpilot.py")]
    assert all(f"_runtime = _sibling({name!r})" in content for content in dropins)


def _run(checkout: Path, args: list[str], cache: Path, compiler: bool = True):
    """A fresh python in the checkout, its build cache ``cache``; without ``compiler``, no
    compiler, ninja or anything else on PATH, and CXX a compiler that always fails."""
    env = {
        "PYTHONPATH": str(checkout),
        "HOME": str(cache.parent),
        "TORCH_EXTENSIONS_DIR": str(cache),
    }
    if compiler:
        env["PATH"] = os.environ["PATH"]
    else:
        (cache.parent / "empty-bin").mkdir(exist_ok=True)
        env |= {"PATH": str(cache.parent / "empty-bin"), "CXX": "/bin/false"}
    return subprocess.run([sys.executable, *args], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip


@pytest.fixture(scope="module")
def cache(checkout, tmp_path_factory) -> Path:
    """The kernel built once, ahead of time, as the drop-in's header says: this module's only
    compile; every other test loads it from here."""
    folder = tmp_path_factory.mktemp("machine") / "torch_extensions"
    built = _run(checkout, ["-m", DROPIN, "--build"], folder)
    assert built.returncode == 0, built.stderr[-3000:]
    [line] = built.stdout.splitlines()
    assert line.startswith(f"built: {folder / 'kernelpilot'}/"), line
    again = _run(checkout, ["-m", DROPIN, "--build"], folder)
    assert again.returncode == 0 and again.stdout == f"already {line}\n"
    return folder


@pytest.fixture
def modules(checkout, cache, monkeypatch):
    """The user's module and the drop-in, imported as the swap-in line imports them."""
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(cache))
    monkeypatch.syspath_prepend(str(checkout))
    for name in NAMES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    user = importlib.import_module("models.gelu_block")
    dropin = importlib.import_module(DROPIN)
    yield user, dropin
    for name in NAMES:
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
    assert isinstance(kernel, user.Model)
    assert kernel.state_dict().keys() == original.state_dict().keys()
    assert [name for name, _ in kernel.named_parameters()] == [
        name for name, _ in original.named_parameters()
    ]
    with torch.no_grad():
        kernel(*inputs())  # the kernel is loaded
    kernel(*(x.requires_grad_() for x in inputs())).sum().backward()
    assert [name for name, _ in kernel.named_modules()] == ["", "linear"]


def test_inference_runs_the_kernel_not_the_original(modules, monkeypatch):
    user, dropin = modules
    original, kernel = built(*modules)
    forward = user.Model.forward
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
    # A copy (an EMA model, say) leaves the loaded kernel behind and loads it again.
    twin = copy.deepcopy(kernel)
    torch.testing.assert_close(twin(*inputs()), expected, rtol=1e-4, atol=1e-4)
    # The kernel computes with the drop-in's parameters as they are now, not as first handed.
    with torch.no_grad():
        kernel.bias.add_(1.0)
        original.bias.add_(1.0)
        kernel.linear.weight = torch.nn.Parameter(kernel.linear.weight * 2)
        original.linear.weight.mul_(2)
        expected = forward(original, *inputs())
        torch.testing.assert_close(kernel(*inputs()), expected, rtol=1e-4, atol=1e-4)


def test_where_the_kernel_was_not_verified_the_original_runs_silently(modules, monkeypatch):
    user, dropin = modules
    original, kernel = built(*modules)
    ran = []
    forward = user.Model.forward
    monkeypatch.setattr(user.Model, "forward", lambda self, *a: ran.append(1) or forward(self, *a))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch.no_grad():
            kernel.double()(*(x.double() for x in inputs()))  # verified in float32
            kernel.float()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                kernel(*inputs())
        assert len(ran) == 2
        with torch.no_grad():
            kernel(*inputs())
    assert len(ran) == 2


def test_training_gets_the_originals_gradients_on_its_own_parameters(modules):
    original, kernel = built(*modules)
    grads = []
    for module in (original, kernel):
        x, residual = (value.requires_grad_() for value in inputs())
        torch.manual_seed(2)
        rng = torch.get_rng_state()
        module(x, residual).pow(2).sum().backward()
        assert torch.equal(torch.get_rng_state(), rng)
        grads.append([x.grad, residual.grad, *(p.grad for p in module.parameters())])
    for got, want in zip(grads[1], grads[0], strict=True):
        assert got is not None and want is not None
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert "_kernelpilot_links" not in kernel.__dict__  # training never built the kernel
    # Only the parameters require grad: the fallback still runs, and trains the drop-in's own.
    kernel.zero_grad()
    kernel(*inputs()).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in kernel.parameters())


# What a fresh process on a machine without a compiler does: prints KERNEL or ORIGINAL per call.
PROBE = """
import sys, warnings
import torch
import models.gelu_block as user
import models.gelu_block_kernelpilot as dropin
assert "models.gelu_block_verified_kernelpilot" not in sys.modules  # the import built nothing
torch.manual_seed(0)
original = user.Model(64, 128)
kernel = dropin.ModelKernelpilot(64, 128)
kernel.load_state_dict(original.state_dict())
forward, ran = user.Model.forward, []
user.Model.forward = lambda self, *a: ran.append(1) or forward(self, *a)
x, residual = torch.randn(16, 64), torch.randn(16, 128)
with warnings.catch_warnings(record=True) as caught, torch.no_grad():
    warnings.simplefilter("always")
    for _ in range(2):
        ran.clear()
        expected = forward(original, x, residual)
        torch.testing.assert_close(kernel(x, residual), expected, rtol=1e-4, atol=1e-4)
        print("ORIGINAL" if ran else "KERNEL")
for warning in caught:
    print(warning.category.__name__, warning.message)
"""


def test_a_build_serves_a_machine_without_a_compiler(checkout, cache):
    ran = _run(checkout, ["-c", PROBE], cache, compiler=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == ["KERNEL", "KERNEL"]


def test_without_a_build_or_a_compiler_one_warning_and_the_original(checkout, tmp_path):
    empty = tmp_path / "torch_extensions"
    ran = _run(checkout, ["-c", PROBE], empty, compiler=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    first, second, warning, *more = ran.stdout.splitlines()
    assert (first, second, more) == ("ORIGINAL", "ORIGINAL", [])
    assert warning.startswith(
        "KernelUnavailableWarning kernelpilot: the kernel of ModelKernelpilot"
    )
    assert f"python -m {DROPIN} --build" in warning and "Ninja is required" in warning
    build = _run(checkout, ["-m", DROPIN, "--build"], empty, compiler=False)
    assert build.returncode == 1 and build.stdout == ""
    assert "the kernel of ModelKernelpilot was not built: RuntimeError: Ninja" in build.stderr


def test_a_cached_library_that_changed_is_not_loaded(checkout, cache, tmp_path):
    copied = tmp_path / "torch_extensions"
    subprocess.run(["cp", "-r", str(cache), str(copied)], check=True)
    [library] = (copied / "kernelpilot").glob("*/*.so")
    library.write_bytes(library.read_bytes() + b"\0")
    ran = _run(checkout, ["-c", PROBE], copied, compiler=False)  # it would be built again
    assert ran.returncode == 0, ran.stderr[-3000:]
    first, second, warning = ran.stdout.splitlines()
    assert (first, second) == ("ORIGINAL", "ORIGINAL") and "Ninja is required" in warning


def _pytest(checkout: Path, cache: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_gelu_block_kernelpilot.py"],
        cwd=checkout, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TORCH_EXTENSIONS_DIR": str(cache)},
    )  # fmt: skip


def test_the_generated_test_passes_and_fails_without_the_fallback(checkout, cache):
    passed = _pytest(checkout, cache)
    assert passed.returncode == 0, passed.stdout[-3000:]
    assert "2 passed" in passed.stdout
    [runtime] = checkout.glob("models/kernelpilot_runtime_*.py")
    text = runtime.read_text()
    assert text.count(FALLBACK) == 1
    runtime.write_text(text.replace(FALLBACK, "        if True:  # no fallback\n"))
    try:
        broken = _pytest(checkout, cache)
    finally:
        runtime.write_text(text)
    assert broken.returncode == 1, broken.stdout[-3000:]
    assert "1 failed, 1 passed" in broken.stdout
    assert "test_model_kernelpilot_trains_like_the_original" in broken.stdout


def test_the_generated_test_compares_in_strict_float32(checkout, cache):
    """Where the user's settings round float32 library calls (TF32, here a stand-in for it on
    the CPU), the generated test compares both modules with every float32 setting strict: the
    drop-in's kernel against the original is then the same function, not two roundings."""
    module = checkout / MODULE
    text = module.read_text()
    rounding = text.replace(
        "import torch.nn.functional as F\n",
        'import torch.nn.functional as F\n\ntorch.backends.mkldnn.matmul.fp32_precision = "tf32"\n',
    ).replace(
        "        y = self.linear(x)\n",
        "        y = self.linear(x)\n"
        '        if torch.backends.mkldnn.matmul.fp32_precision == "tf32":  # rounds as TF32 would\n'
        "            y = y + y.abs() * 1e-3\n",
    )
    assert rounding.count("fp32_precision") == 2
    test = checkout / "tests/test_gelu_block_kernelpilot.py"
    generated = test.read_text()
    module.write_text(rounding)
    try:
        strict = _pytest(checkout, cache)
        test.write_text(generated.replace("\n    _strict_float32()\n", "\n"))
        as_set = _pytest(checkout, cache)
    finally:
        module.write_text(text)
        test.write_text(generated)
    assert strict.returncode == 0 and "2 passed" in strict.stdout, strict.stdout[-3000:]
    # training runs the original forward in both (the drop-in's kernel is for inference)
    assert as_set.returncode == 1 and "1 failed, 1 passed" in as_set.stdout, as_set.stdout[-3000:]
    assert "test_model_kernelpilot_matches_the_original" in as_set.stdout


def test_a_torch_without_no_implicit_headers_builds_the_kernel_with_its_headers(
    tmp_path, monkeypatch
):
    """torch before 2.8 has no ``no_implicit_headers``; the shipped cache builds a candidate
    that passes it (kernelpilot's CUDA kernels, which include what they use) with torch's
    headers put first, instead of failing on the argument."""
    from bot.pr.shipped import kernel_cache

    received: dict = {}

    class Called(Exception):
        pass

    def load_inline_of_torch_2_7(
        name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
        extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
        build_directory=None, verbose=False, with_cuda=None, is_python_module=True,
        with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False,
    ):  # fmt: skip
        received.update(name=name, functions=functions, build_directory=build_directory)
        raise Called

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    serve = kernel_cache._CachedLoadInline(load_inline_of_torch_2_7)
    with pytest.raises(Called):
        serve("m", "#include <torch/extension.h>\nint f();", functions=["f"],
              no_implicit_headers=True)  # fmt: skip
    assert received["name"] == "m" and received["functions"] == ["f"]
    assert str(tmp_path) in received["build_directory"]
