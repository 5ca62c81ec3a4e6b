"""The candidate contract the agent prompts state, generated from the checks' own tables.

LLM-written kernels fail the gate on everyday idioms (``import os``, try/except fallbacks,
kernels compiled lazily into ``self``) unless told the rules up front, and a model left to
guess an open question (which stream spelling is accepted, whether a library op's output may
be written in place) writes a wasted attempt or a needlessly cautious kernel. The rules told
must be the rules checked: every list below is read from the checks' tables
(``harness.static.python_rules``, ``harness.static.native``, ``harness.static.symbols``,
``harness.workers.profiling``, ``harness.builds.cache``) when the contract is made, every
reason is the check's own wording, and every rule is tagged with the stage that enforces it
([static], [native], [symbols], [run:check]), so that a rejection names what the model was
told. Where a rule is a regular expression or a question of scope, the contract shows sample
spellings (``agents.contract_examples``), each confirmed against the checks (a sample whose
verdict changed drops out rather than misleading the model); tests/test_contract_examples.py
feeds all of them, the run-time ones included, through the real checks. The prose around the
lists lives in ``prompts/contract*.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch

from agents import contract_examples as examples
from agents.templates import render
from harness.builds import cache as buildcache
from harness.static import native as native_gate
from harness.static import native_directives, symbols
from harness.static import python_rules as gate_rules
from harness.workers import profiling

# Standard-library modules models reach for most (paths, timing, caching, threads): named
# in the contract when the gate's table refuses them.
STDLIB_SAMPLES = (
    "os", "sys", "subprocess", "ctypes", "threading", "time", "functools", "itertools",
    "collections", "importlib", "inspect", "pickle", "random", "pathlib", "numpy",
)  # fmt: skip
# Torch submodules off the allow-list, named when the gate's table refuses them.
TORCH_SUBMODULE_SAMPLES = (
    "autograd", "fx", "jit", "profiler", "distributed", "multiprocessing", "testing", "package",
    "hub", "amp",
)  # fmt: skip
# nn.Module methods models are tempted to override, named when the gate's table refuses them.
MODULE_METHOD_SAMPLES = (
    "eval", "to", "cuda", "float", "half", "train", "state_dict", "load_state_dict", "_apply",
    "register_buffer",
)  # fmt: skip
# Kernel-source spellings shown as examples; only those check_native rejects are shown.
NATIVE_SAMPLES = (
    "std::thread", "pthread_create", "std::async", "system(", "dlopen(", "fopen(",
    "std::filesystem", "cudaLaunchHostFunc", "cudaStreamAddCallback", "static int calls = 0;",
    "at::native::", "c10::Dispatcher", "RecordFunction", "TORCH_LIBRARY", "getenv",
    "std::chrono", "PyObject", "py::object", "a ## b", '#include "../secret.h"',
    "#include HEADER_MACRO", "#include_next <cmath>", "#if __has_include(<x.h>)",
    '#pragma GCC dependency "f"', "#include <sys/socket.h>", "socket(",
    "namespace { float cache[256]; }", "__device__ int launches;",
    "__constant__ float weights[256];", "struct S { static int calls; };",
)  # fmt: skip
# What the kernel-source reasons all begin with; the contract's tag says it once.
NATIVE_PREFIX = "kernel source "


def candidate_contract(device: str, dtype: str) -> str:
    """The rules a candidate for a ``device`` (cpu or cuda) and ``dtype`` problem must follow."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: the contract is written for 'cpu' or 'cuda'")
    values = {
        "device": device,
        "dtype": dtype,
        "in_place": examples.shown(examples.IN_PLACE),
        "library_calls": examples.shown(examples.LIBRARY_CALLS, "run:no_pytorch_compute"),
        "library_ops": _lines(
            f"{family}: {', '.join(sorted(public_ops(ops)))}"
            for family, ops in profiling.LIBRARY_FAMILIES.items()
        ),
        "layout_ops": ", ".join(sorted(public_ops(profiling.LAYOUT_OPS))),
        "allowed_imports": _lines(allowed_import_lines()),
        "library_imports": _lines(
            f"from {module} import {', '.join(sorted(names))}"
            for module, names in sorted(gate_rules.LIBRARY_NAMES.items())
        ),
        "allowed_modules": _names(sorted(gate_rules.ALLOWED_MODULES)),
        "torch_submodules": _names(
            name for name in TORCH_SUBMODULE_SAMPLES if name in gate_rules.TORCH_SUBMODULE_NAMES
        ),
        "stdlib_examples": _names(stdlib_examples()),
        "forbidden_calls": _names(f"{name}()" for name in sorted(gate_rules.FORBIDDEN_CALLS)),
        "forbidden_attributes": _reasons(forbidden_attribute_reasons()),
        "prefix_names": examples.shown(examples.PREFIX_NAMES, "static"),
        "any_owner": examples.shown(examples.ANY_OWNER, "static"),
        "escape_attributes": _names(sorted(gate_rules.ESCAPE_ATTRIBUTES)),
        "frame_prefixes": _names(f"{prefix}*" for prefix in gate_rules.FRAME_PREFIXES),
        "allowed_decorators": _names(allowed_decorators()),
        **module_method_values(),
        "mutators": _names(f".{name}()" for name in sorted(gate_rules.MUTATORS)),
        "allowed_pragmas": "; ".join(allowed_pragmas()),
        "native_rules": _reasons(native_examples()),
        "build_flags": _names(alternatives(buildcache.ALLOWED_FLAG.pattern)),
        "symbols": examples.shown(examples.CPU_SYMBOLS, "symbols"),
        "symbols_reason": symbols_reason(),
        "device_rules": render(f"contract_{device}", _device_values(device)),
        "precision_rules": _precision_rules(dtype),
    }
    return render("contract", values)


def allowed_import_lines() -> list[str]:
    """One import statement per module on the gate's import allow-list."""
    lines = []
    for module in sorted(gate_rules.ALLOWED_IMPORTS):
        if module == "__future__":
            lines.append("from __future__ import annotations")
        elif module == "torch.nn":
            lines.append("import torch.nn as nn")
        elif module == "torch.nn.functional":
            lines.append("import torch.nn.functional as F")
        elif module == "torch.utils.cpp_extension":
            lines.append("from torch.utils.cpp_extension import load_inline")
        else:
            lines.append(f"import {module}")
    return lines


def allowed_decorators() -> list[str]:
    """The decorators the gate lets through: staticmethod and its autograd-mode calls."""
    calls = [f"@torch.{call.__name__}()" for call in gate_rules.ALLOWED_DECORATOR_CALLS]
    return ["@staticmethod", *calls]


def stdlib_examples() -> list[str]:
    """Well-known modules the gate refuses (standard library or not on the allow-list)."""
    return [
        name
        for name in STDLIB_SAMPLES
        if name in gate_rules.STDLIB_MODULES or name not in gate_rules.ALLOWED_IMPORTS
    ]


def forbidden_attribute_reasons() -> dict[str, list[str]]:
    """Refused attribute names grouped by the gate's reason for refusing them: those refused
    on every object, then the process-wide state refused on anything but ``self``."""
    grouped: dict[str, list[str]] = {}
    for name, why in gate_rules.FORBIDDEN_ATTRIBUTES.items():
        grouped.setdefault(why, []).append(f".{name}")
    state = f"{gate_rules.forbidden_name('set_x')} (as attributes of anything but `self`)"
    grouped[state] = [f".{name}" for name in gate_rules.GLOBAL_STATE_ATTRIBUTES]
    return grouped


def module_method_values() -> dict[str, str]:
    """The rule of ``MODULE_METHODS`` as the gate builds it: every name ``nn.Module`` has but
    the few it lets a candidate define, and the special methods it adds; with samples."""
    own = [name for name in dir(torch.nn.Module) if not name.startswith("__")]
    return {
        "module_free": _names(name for name in own if name not in gate_rules.MODULE_METHODS),
        "module_dunders": _names(
            sorted(name for name in gate_rules.MODULE_METHODS if name.startswith("__"))
        ),
        "module_methods": _names(
            name for name in MODULE_METHOD_SAMPLES if name in gate_rules.MODULE_METHODS
        ),
    }


def native_examples() -> dict[str, list[str]]:
    """Kernel-source samples the native gate rejects, grouped by the gate's reason."""
    grouped: dict[str, list[str]] = {}
    for sample in NATIVE_SAMPLES:
        for reason in native_gate.check_native(sample, "float32"):
            names = grouped.setdefault(reason.split(": ")[0].removeprefix(NATIVE_PREFIX), [])
            if f"`{sample}`" not in names:
                names.append(f"`{sample}`")
    return grouped


def allowed_pragmas() -> list[str]:
    """The pragmas the native gate lets through: ``#pragma`` and its allowed names, then each
    allowed first word with the names it may be followed by."""
    single = f"`#pragma` {', '.join(sorted(native_directives.ALLOWED_PRAGMAS))}"
    double = [
        f"`#pragma {first}` {', '.join(sorted(seconds))}"
        for first, seconds in sorted(native_directives.ALLOWED_SUB_PRAGMAS.items())
    ]
    return [single, *double]


def public_ops(ops: Iterable[str]) -> list[str]:
    """The ops a candidate calls by name; the profiler's internal variants count the same."""
    return [op for op in ops if not op.startswith(("_", "cudnn_", "mkldnn_", "native_"))]


def symbols_reason() -> str:
    """The symbol check's own reason for refusing a system call, after its ``name: ``."""
    refused = [s.fed for s in examples.CPU_SYMBOLS if not s.accepted]
    return symbols.symbol_problems(refused[:1])[0].split(": ", 1)[1]


def low_precision_native() -> list[str]:
    """The reduced-precision spellings the native gate refuses in a float32 problem."""
    return alternatives(native_gate.LOW_PRECISION_NATIVE)


def alternatives(pattern: str) -> list[str]:
    """The top-level alternatives of a regular expression of names, as readable globs.

    ``\\b(kHalf|__float2half\\w*)\\b`` gives ``kHalf``, ``__float2half*``.
    """
    body = re.sub(r"^\^|\$$", "", re.sub(r"^\\b|\\b$", "", pattern))
    if body.startswith("(") and body.endswith(")") and _top_level_split(body[1:-1]) is not None:
        body = body[1:-1]
    parts = _top_level_split(body) or [body]
    readable = []
    for part in parts:
        part = re.sub(r"\\[wd][*+]|\[[^\]]*\][*+]?|\([^)]*\)\??", "*", part)
        readable.append(re.sub(r"\*+", "*", part.replace("\\", "")))
    return readable


def _top_level_split(body: str) -> list[str] | None:
    """``body`` split at ``|`` outside parentheses; None when its parentheses do not balance."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(body):
        if char == "(" and body[index - 1 : index] != "\\":
            depth += 1
        elif char == ")" and body[index - 1 : index] != "\\":
            depth -= 1
            if depth < 0:
                return None
        elif char == "|" and depth == 0:
            parts.append(body[start:index])
            start = index + 1
    parts.append(body[start:])
    return parts if depth == 0 else None


def _device_values(device: str) -> dict[str, str]:
    if device == "cuda":
        return {
            "arch_flags": examples.shown(examples.ARCH_FLAGS, "native"),
            "streams": examples.shown(examples.STREAMS),
            "cuda_utilities": _names(native_gate.CUDA_UTILITIES),
            "cuda_symbols": examples.shown(examples.CUDA_SYMBOLS, "symbols"),
        }
    threads_and_ops = symbols.aten_op_problems(["at::_ops::mm::call", "GOMP_parallel"])
    return {
        "cpu_flags": _names(buildcache.CPU_CFLAGS),
        "source_flags": _names(buildcache.SOURCE_FLAGS),
        "openmp_and_ops": "; ".join(threads_and_ops),
    }


def _precision_rules(dtype: str) -> str:
    if dtype == "float32":
        return render(
            "contract_float32",
            {
                "low_precision_python": _names(sorted(gate_rules.LOW_PRECISION_PY)),
                "low_precision_native": _names(low_precision_native()),
            },
        )
    return render("contract_reduced_precision", {"dtype": dtype})


def _names(items: Iterable[str]) -> str:
    return ", ".join(f"`{item}`" if not item.startswith("`") else item for item in items)


def _lines(items: Iterable[str]) -> str:
    return "\n".join(f"    {item}" for item in items)


def _reasons(grouped: dict[str, list[str]]) -> str:
    return "\n".join(
        f"- {', '.join(_quoted(names))}: {why}" for why, names in grouped.items() if why
    )


def _quoted(names: list[str]) -> list[str]:
    return [name if name.startswith(("`", "(")) else f"`{name}`" for name in names]
