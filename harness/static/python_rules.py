"""What a candidate's Python may use: the tables of the static gate (``harness.static.python``)."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ALLOWED_IMPORTS = {
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.utils.cpp_extension",
    "math",
    "typing",
    "dataclasses",  # a forward that returns a dataclass: the candidate returns one alike
    "__future__",
}
# Libraries whose named functions and layers a candidate may import, as ``from M import name``
# and only those names: their calls are tensor operations written another way (einops'
# ``rearrange`` is a reshape and a permute), and a module written with them (vit-pytorch's
# attention) keeps them in its copied forward. The gate never imports these modules (a trusted
# job need not have them, and runs none of their code): it cannot resolve the names, and
# checks them as it checks any name it cannot resolve (their attributes by name: no dunders,
# no recipes, nothing set on them).
LIBRARY_NAMES = {
    "einops": frozenset(
        {"rearrange", "repeat", "reduce", "einsum", "pack", "unpack", "parse_shape"}
    ),
    "einops.layers.torch": frozenset({"Rearrange", "Reduce"}),
}
# The modules an attribute chain from an allowed import may pass through (``torch.nn.init``,
# ``torch.cuda``); any other module it reaches (``torch.package``, ``torch.testing``) is a way
# around the import allow-list.
ALLOWED_MODULES = {
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.nn.parameter",
    "torch.cuda",
    "torch.utils",
    "torch.utils.cpp_extension",
    "torch.linalg",
    "torch.special",
    "torch.fft",
    "math",
    "typing",
    "dataclasses",
}
# torch re-exports modules it imported (torch.sys, torch.os, torch.builtins, ...): an attribute
# named like a standard-library module reaches around the import allow-list. Tensor methods
# that share a name with one stay allowed.
STDLIB_MODULES = set(sys.stdlib_module_names) - {"chunk", "select", "trace", "math", "dataclasses"}
FORBIDDEN_CALLS = {
    "getattr",
    "setattr",
    "delattr",
    "eval",
    "exec",
    "compile",
    "globals",
    "locals",
    "vars",
    "__import__",
    "open",
    "id",
    "breakpoint",
    "memoryview",
}
# Attribute names whose use means reaching around the harness or under the hood of tensors.
FORBIDDEN_ATTRIBUTES = {
    "data_ptr": "reads a raw pointer in Python (caching keyed on addresses; C++'s in kernel "
    "sources is fine)",
    "untyped_storage": "reaches tensor storage directly",
    "storage": "reaches tensor storage directly",
    "set_": "swaps tensor storage",
    "as_subclass": "makes a tensor subclass",
    "_make_subclass": "makes a tensor subclass",
    "load": "loads files or libraries at run time",
    "load_library": "loads a native library",
    "from_file": "reads a file",
    "set_float32_matmul_precision": "lowers matmul precision",
    "autocast": "lowers precision",
    "compile": "hands the work to torch.compile instead of a kernel of its own",
    "jit": "hands the work to TorchScript instead of a kernel of its own",
    "library": "registers operators at run time",
    "get_type_hints": "evaluates annotation strings as code",
    "ForwardRef": "evaluates annotation strings as code",
    "overrides": "intercepts torch functions (modes and handlers)",
    "TorchFunctionMode": "intercepts every torch function",
    "TorchDispatchMode": "intercepts every operator",
    "DataLoader": "starts worker processes",
    # einops' layers hand out the recipes of its module-wide cache: one object for every call
    # and instance with that pattern, which takes any attribute (state across calls).
    "recipe": "reaches einops' recipe cache, shared across calls",
    "multirecipe": "reaches einops' recipe cache, shared across calls",
    "tofile": "writes a file",
    "distributed": "starts or joins other processes",
}
# Attribute names that reach the import system, the builtins that the gate refuses by name, or
# the interpreter's frames, code objects and tracebacks (and through them every module's globals).
ESCAPE_ATTRIBUTES = {
    **dict.fromkeys(
        ("import_module", "sys_importer", "find_spec", "load_module", "exec_module"),
        "imports modules at run time, around the import allow-list",
    ),
    **dict.fromkeys(
        ("getattr", "setattr", "delattr", "exec", "globals", "locals", "vars", "breakpoint"),
        "a builtin that the gate refuses, reached as an attribute",
    ),
}
FRAME_PREFIXES = ("f_", "co_", "gi_", "cr_", "ag_", "tb_")
# Decorators that only change autograd's mode around the call, by the object they name.
ALLOWED_DECORATOR_CALLS = (torch.no_grad, torch.inference_mode)
# Process-wide state that the baselines, timed in the same process, run under too.
GLOBAL_STATE_ATTRIBUTES = {
    "backends": "changes PyTorch's backend flags",
    "compiler": "touches torch.compile's state (the compiled baseline)",
    "use_deterministic_algorithms": "changes PyTorch's algorithm selection",
    "empty_cache": "empties the allocator's cache",
    "manual_seed": "reseeds the global random generator",
    "seed": "reseeds the global random generator",
    "profiler": "touches the profiler that the checks use",
}
# nn.Module methods the harness calls on ModelNew: redefining one changes what they do.
MODULE_METHODS = {name for name in dir(torch.nn.Module) if not name.startswith("__")} - {
    "forward",
    "extra_repr",
} | {"__call__", "__getattr__", "__setattr__", "__setstate__"}
LOW_PRECISION_PY = {"half", "bfloat16", "float16", "bf16", "fp16"}

# Calls that change a container in place: state across calls when the container is shared.
MUTATORS = {
    "append",
    "extend",
    "insert",
    "update",
    "setdefault",
    "pop",
    "popitem",
    "clear",
    "add",
    "__setitem__",
    "register_buffer",
    "register_parameter",
}


def forbidden_name(name: str) -> str:
    """Why an attribute or imported name is off limits to a candidate; empty when it is not."""
    if name.startswith("set_"):
        return "changes a global setting, which the baselines in this process run under"
    if name.startswith("register_") and name not in ("register_buffer", "register_parameter"):
        return "registers a hook or handler that runs outside the candidate's own forward"
    if name in GLOBAL_STATE_ATTRIBUTES:
        return f"{GLOBAL_STATE_ATTRIBUTES[name]}, which the baselines in this process run under"
    return FORBIDDEN_ATTRIBUTES.get(name, "")


def _torch_submodule_names() -> set[str]:
    """Public submodules directly under torch/, torch/nn/, torch/utils/ and torch/cuda/.

    Read from the file system, so modules that torch loads lazily (``torch.onnx``) count too.
    """
    root = Path(torch.__file__).parent
    names = {
        path.stem if path.suffix == ".py" else path.name
        for folder in (root, root / "nn", root / "utils", root / "cuda")
        for path in folder.iterdir()
        if path.suffix == ".py" or (path / "__init__.py").is_file()
    }
    return {name for name in names if not name.startswith("_")}


# On an object the gate cannot resolve (a local, a parameter, a call's result), an attribute named
# like a torch submodule is a module reached around the allow-list: ``self.t = torch`` in
# ``__init__``, then ``self.t.package``. Tensor and Module attributes of the same name
# (``x.cuda``, ``x.data``) and the allowed leaves are not.
TORCH_SUBMODULE_NAMES = (
    _torch_submodule_names()
    - set(dir(torch.Tensor))
    - set(dir(torch.nn.Module))
    - {"nn", "functional", "init", "parameter", "linalg", "special", "fft", "cpp_extension"}
)
