"""The drop-in's class: the kernel where it was verified, the user's own forward elsewhere; and
its build ahead of time.

The drop-in class subclasses this mixin and the user's class, not the verified ``ModelNew``, so
that importing it builds nothing (the verified file compiles its kernel when imported:
``kernel_cache`` says why that needs a compiler in every process). ``ModelNew`` is imported and
built on the first forward that takes the kernel, its ``load_inline`` served from the cache; it
is kept beside the drop-in, not as a submodule, and handed the drop-in's own parameters, buffers
and train/eval modes before each call (the names match: ``ModelNew`` loads the user's
``state_dict`` strictly), so there is no second copy in memory and nothing to keep in sync by
hand.

The kernel runs only where it was verified: no backward needed (grad mode off, or nothing that
requires grad), inputs, parameters and buffers on its device and in its dtype, autocast off.
Elsewhere the user's forward runs, silently: autograd works as before. Where the kernel cannot be
built or loaded (no compiler, no ninja, a library that does not load, a cache folder that cannot
be written), one ``KernelUnavailableWarning`` says why and the user's forward runs from then on,
rather than the import or the forward failing. ``build``, run by ``python -m
<package>.<module>_kernelpilot --build``, fills the cache ahead of time and raises what stops it.

Everything from the marker on goes into the shipped runtime (``bot.pr.dropin``), after
``kernel_cache``'s; the imports above it are merged.
"""

# kernelpilot: shipped imports
from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import torch

from bot.pr.shipped.kernel_cache import _ENTRIES, _cache_root, _cached_load_inline

# kernelpilot: shipped code
# What stops a kernel from being built or loaded on a machine: no ninja or compiler (torch
# raises RuntimeError, OSError or a SubprocessError), a library that does not load (ImportError),
# a cache folder that cannot be written (OSError).
_UNAVAILABLE = (OSError, ImportError, RuntimeError, subprocess.SubprocessError)
_FAILED: dict[str, BaseException] = {}  # verified module -> what stopped its kernel (warned once)


class KernelUnavailableWarning(RuntimeWarning):
    """The kernel could not be built or loaded here: the original forward runs instead."""


class KernelpilotDropin(torch.nn.Module):
    """Mixed in before the user's class. The generated subclass names the verified module (its
    importable name), its own (for ``python -m``), the device and dtype, and the constructor
    arguments ``build()`` uses."""

    _kernelpilot_verified: str
    _kernelpilot_dotted: str
    _kernelpilot_device: str
    _kernelpilot_dtype: torch.dtype

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._kernelpilot_arguments = (args, kwargs)

    @staticmethod
    def _kernelpilot_init() -> tuple[list, dict]:
        raise NotImplementedError("the generated subclass names its constructor arguments")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._kernelpilot_verified_for(args, kwargs):
            kernel = self._kernelpilot_loaded(args, kwargs)
            if kernel is not None:
                return kernel.forward(*args, **kwargs)  # its hooks are none: ours is the call
        return super().forward(*args, **kwargs)

    def _kernelpilot_verified_for(self, args: tuple, kwargs: dict) -> bool:
        """No backward needed, and every tensor where the kernel was verified. Every forward
        asks, so it reads the tensors' cheapest properties, and once the kernel is loaded only
        the tensors it shares (handing them over on the way)."""
        if _autocast_on(self._kernelpilot_device):
            return False
        tensors = _tensors(args) + _tensors(kwargs.values())
        links = self.__dict__.get("_kernelpilot_links")
        if links is not None and links.current():
            tensors += links.share()
        else:
            for module in self.modules():
                tensors += [tensor for tensor in module._parameters.values() if tensor is not None]
                tensors += [tensor for tensor in module._buffers.values() if tensor is not None]
        grad = torch.is_grad_enabled()
        cuda, dtype = self._kernelpilot_device == "cuda", self._kernelpilot_dtype
        for tensor in tensors:
            if tensor is None:  # a parameter set to None (Linear's bias=False), or deleted
                continue
            if not (tensor.is_cuda if cuda else tensor.is_cpu):
                return False
            if tensor.dtype != dtype and tensor.is_floating_point():
                return False
            if grad and tensor.requires_grad:
                return False
        return True

    def _kernelpilot_loaded(self, args: tuple, kwargs: dict) -> torch.nn.Module | None:
        """The kernel's ModelNew (built on first need) holding this module's tensors and modes;
        None where it cannot be built or loaded here."""
        links = self.__dict__.get("_kernelpilot_links")
        if links is None or not links.current():
            kernel = links.kernel if links is not None else self._kernelpilot_new(args, kwargs)
            if kernel is None:
                return None
            links = _Links(self, kernel)  # new, or a submodule of this one was replaced
            object.__setattr__(self, "_kernelpilot_links", links)  # not a submodule
            links.share()
        for own, kernel_module in links.modes:
            if kernel_module.training != own.training:  # Module.__setattr__ costs microseconds
                kernel_module.training = own.training
        return links.kernel

    def _kernelpilot_new(self, args: tuple, kwargs: dict) -> torch.nn.Module | None:
        kernel = _new_kernel(type(self), *self._kernelpilot_arguments)
        if kernel is not None:
            kernel.train(self.training)  # its modules that the drop-in lacks follow the top's
            _place_own_tensors(self, kernel, _first_device(self, args, kwargs))
        return kernel

    def __getstate__(self) -> dict:
        """Copies and pickles leave the kernel behind (it holds a loaded library); they load it
        again on their first kernel forward."""
        state = super().__getstate__()
        state.pop("_kernelpilot_links", None)
        return state


class _Links:
    """Where the kernel's ModelNew takes the drop-in's tensors and modes from, found once: the
    names match (ModelNew loads the user's state_dict strictly). The drop-in's own dicts are read
    on every call, so a parameter or buffer replaced in them (``.to()``, ``load_state_dict``
    with ``assign``) is seen; a replaced submodule makes the links stale (``current``)."""

    def __init__(self, module: torch.nn.Module, kernel: torch.nn.Module) -> None:
        self.kernel = kernel
        theirs = dict(kernel.named_modules(remove_duplicate=False))
        self.children = []  # (parent's submodules, name, submodule): what current() checks
        self.modes = []  # (own module, kernel's module)
        self.slots = []  # (own dict, name, kernel's dict)
        for name, own in module.named_modules(remove_duplicate=False):
            self.children += [(own._modules, key, child) for key, child in own._modules.items()]
            kernel_module = theirs.get(name)
            if kernel_module is None:
                continue
            self.modes.append((own, kernel_module))
            for own_dict in (own._parameters, own._buffers):
                for leaf in own_dict:
                    if leaf in kernel_module._parameters:
                        self.slots.append((own_dict, leaf, kernel_module._parameters))
                    elif leaf in kernel_module._buffers:
                        self.slots.append((own_dict, leaf, kernel_module._buffers))

    def current(self) -> bool:
        return all(parent.get(key) is child for parent, key, child in self.children)

    def share(self) -> list:
        """Hands the drop-in's tensors to the kernel's modules; the tensors handed."""
        tensors = []
        for own_dict, leaf, kernel_dict in self.slots:
            tensor = own_dict.get(leaf)
            kernel_dict[leaf] = tensor
            tensors.append(tensor)
        return tensors


def _new_kernel(cls: Any, args: tuple, kwargs: dict) -> torch.nn.Module | None:
    if cls._kernelpilot_verified in _FAILED:
        return None
    try:
        return _kernel_module(cls, args, kwargs)
    except _UNAVAILABLE as error:
        _FAILED[cls._kernelpilot_verified] = error
        warnings.warn(_unavailable(cls, error), KernelUnavailableWarning, stacklevel=4)
        return None


def _kernel_module(cls: Any, args: tuple, kwargs: dict) -> torch.nn.Module:
    """``ModelNew`` of the verified file, built with these constructor arguments on the cpu
    without touching the caller's random stream, its ``load_inline`` calls served from the
    cache."""
    with _cached_load_inline():
        verified = importlib.import_module(cls._kernelpilot_verified)
        with torch.random.fork_rng(devices=[]):
            return verified.ModelNew(*args, **kwargs)


def _unavailable(cls: Any, error: BaseException) -> str:
    detail = f"{type(error).__name__}: {error}"
    if len(detail) > 2000:
        detail = detail[:2000] + " [...]"
    cuda = cls._kernelpilot_device == "cuda"
    tools = "a C++ compiler, ninja and nvcc" if cuda else "a C++ compiler and ninja"
    return (
        f"kernelpilot: the kernel of {cls.__name__} could not be built or loaded here, so "
        f"{cls.__name__} runs the original forward (correct, at eager speed). Build it once on "
        f"this machine, with {tools}: python -m {cls._kernelpilot_dotted} --build; it is "
        f"cached under {_cache_root()}. The error: {detail}"
    )


def _place_own_tensors(module: Any, kernel: torch.nn.Module, device: torch.device) -> None:
    """Tensors of the kernel's that the drop-in has none of (non-persistent buffers) go where the
    drop-in's are, as the harness placed them: on the device, floating ones in its dtype."""
    own = {name for name, _ in module.named_parameters(remove_duplicate=False)}
    own |= {name for name, _ in module.named_buffers(remove_duplicate=False)}
    theirs = [
        *kernel.named_parameters(remove_duplicate=False),
        *kernel.named_buffers(remove_duplicate=False),
    ]
    for name, tensor in theirs:
        if name in own:
            continue
        owner_name, _, leaf = name.rpartition(".")
        owner = kernel.get_submodule(owner_name)
        if tensor.is_floating_point():
            placed = tensor.to(device, module._kernelpilot_dtype)
        else:
            placed = tensor.to(device)
        if leaf in owner._parameters:
            owner._parameters[leaf] = placed  # type: ignore[assignment]  # a tensor will do
        else:
            owner._buffers[leaf] = placed


def _first_device(module: Any, args: tuple, kwargs: dict) -> torch.device:
    tensors = [*module.parameters(), *module.buffers(), *_tensors([args, kwargs])]
    return tensors[0].device if tensors else torch.device(module._kernelpilot_device)


def _autocast_on(device: str) -> bool:
    try:
        return bool(torch.is_autocast_enabled(device))
    except TypeError:  # torch before 2.4 takes no device type
        if device == "cuda":
            return bool(torch.is_autocast_enabled())
        return bool(torch.is_autocast_cpu_enabled())


def _tensors(values: Any) -> list:
    """The tensors among ``values``, and in the lists, tuples and dicts among them."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple, dict)):
            found += _tensors(value.values() if isinstance(value, dict) else value)
    return found


def build(cls: Any) -> dict[Path, bool]:
    """Build the kernel of drop-in class ``cls`` with the constructor arguments it was verified
    with, or find it built: its cache folders, each with whether it was built now (none where
    this process had imported the verified file before: its kernel is loaded already). Raises
    what stopped it."""
    before = set(_ENTRIES)
    args, kwargs = cls._kernelpilot_init()
    _kernel_module(cls, args, kwargs)
    return {folder: built for folder, built in _ENTRIES.items() if folder not in before}


def main(cls: Any, argv: list[str]) -> int:
    """``python -m <the drop-in> --build``."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {cls._kernelpilot_dotted}",
        description=f"Build the verified kernel of {cls.__name__} into this machine's cache "
        f"({_cache_root()}, set by TORCH_EXTENSIONS_DIR), so that the model runs it later "
        "with no compiler and no ninja. The build needs them (and nvcc on cuda).",
    )
    parser.add_argument(
        "--build", action="store_true", help="build the kernel, or find it built; print where"
    )
    if not parser.parse_args(argv).build:
        parser.print_help()
        return 2
    cuda = cls._kernelpilot_device == "cuda"
    if cuda and not os.environ.get("TORCH_CUDA_ARCH_LIST") and not torch.cuda.is_available():
        print(
            "no GPU is visible and TORCH_CUDA_ARCH_LIST is not set: set it to the compute "
            "capability of the GPUs that will run the model (TORCH_CUDA_ARCH_LIST=9.0 for an "
            "H100); the cache is keyed by it.",
            file=sys.stderr,
        )
        return 2
    try:
        entries = build(cls)
    except _UNAVAILABLE as error:
        print(f"the kernel of {cls.__name__} was not built: {type(error).__name__}: {error}",
              file=sys.stderr)  # fmt: skip
        return 1
    if not entries:
        print(f"the verified file of {cls.__name__} called no load_inline through the cache: "
              "run the build in a fresh process", file=sys.stderr)  # fmt: skip
        return 1
    for folder, built in entries.items():
        print(f"{'built' if built else 'already built'}: {folder}")
    return 0
