"""The candidate contract the agent prompts state, generated from the static gate's own tables.

LLM-written kernels fail the gate on everyday idioms (``import os``, try/except fallbacks,
kernels compiled lazily into ``self``) unless told the rules up front. The rules told must be
the rules checked: every list below is read from the gate's tables (``harness.static.python_rules``,
``harness.static.native``, ``harness.static.symbols``, ``harness.workers.profiling``, ``harness.builds.cache``)
when the contract is made, and every reason is the gate's own wording. Where a rule is a
regular expression, the contract shows sample spellings, each confirmed against the gate at
generation time (a sample the gate stops rejecting drops out rather than misleading the
model). The prose around the lists lives in ``prompts/contract*.md``; the rules the harness
checks by running the candidate (state_dict, streams, shapes) are stated there too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from agents.templates import render
from harness.builds import cache as buildcache
from harness.static import native as native_gate
from harness.static import native_directives, symbols
from harness.static import python_rules as gate_rules
from harness.workers import profiling

# Standard-library modules models reach for most (paths, timing, caching, threads): named
# in the contract when the gate's table refuses them.
STDLIB_SAMPLES = (
    "os", "sys", "subprocess", "ctypes", "threading", "multiprocessing", "time", "functools",
    "itertools", "collections", "importlib", "inspect", "builtins", "gc", "pickle", "random",
    "warnings", "logging", "pathlib", "tempfile", "numpy",
)  # fmt: skip
# Kernel-source spellings shown as examples; only those check_native rejects are shown.
NATIVE_SAMPLES = (
    "std::thread", "pthread_create", "std::async", "system(", "dlopen(", "fopen(",
    "std::ifstream(", "cudaLaunchHostFunc", "cudaStreamAddCallback",
    "static std::vector<float> cache;", "static int calls = 0;", "at::native::", "at::cpu::",
    "c10::Dispatcher", "RecordFunction", "TORCH_LIBRARY", "getenv", "std::chrono",
    "PyObject", "py::object", "a ## b",
    '#include "/etc/passwd"', '#include "../secret.h"', "#include HEADER_MACRO",
    "#include_next <cmath>", "#if __has_include(<x.h>)", '#pragma GCC dependency "f"',
    "#include <fstream>", "#include <sys/socket.h>", "c10d::TCPStore", "socket(",
    "std::filesystem", "int counter = 0;", "namespace { float cache[256]; }",
    "__device__ int launches;", "__constant__ float weights[256];",
    "const torch::Tensor cache;", "struct S { static int calls; };",
)  # fmt: skip
# Plain C symbols a built kernel may import, and some it may not: each shown only when the
# symbol allow-list (harness.static.symbols.ALLOWED_C) agrees.
SYMBOLS_ALLOWED = (
    "memcpy", "malloc", "expf", "tanhf", "printf", "GOMP_parallel", "omp_get_thread_num",
    "cudaLaunchKernel", "cudaMemcpyAsync", "cudaEventRecord", "cudaStreamWaitEvent",
    "cublasSgemm_v2",
)  # fmt: skip
SYMBOLS_REFUSED = (
    "sched_setaffinity", "setpriority", "nanosleep", "usleep", "clock_gettime", "signal",
    "pthread_create", "fopen", "socket", "fork", "syscall", "cudaDeviceSetLimit",
    "cudaSetDeviceFlags", "cublasSetMathMode",
)  # fmt: skip


def candidate_contract(device: str, dtype: str) -> str:
    """The rules a candidate for a ``device`` (cpu or cuda) and ``dtype`` problem must follow."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device {device!r}: the contract is written for 'cpu' or 'cuda'")
    values = {
        "device": device,
        "dtype": dtype,
        "allowed_imports": _lines(allowed_import_lines()),
        "allowed_modules": _names(sorted(gate_rules.ALLOWED_MODULES)),
        "torch_submodules": _names(sorted(gate_rules.TORCH_SUBMODULE_NAMES)),
        "stdlib_examples": _names(stdlib_examples()),
        "forbidden_calls": _names(f"{name}()" for name in sorted(gate_rules.FORBIDDEN_CALLS)),
        "forbidden_attributes": _reasons(forbidden_attribute_reasons()),
        "escape_attributes": _names(sorted(gate_rules.ESCAPE_ATTRIBUTES)),
        "frame_prefixes": _names(f"{prefix}*" for prefix in gate_rules.FRAME_PREFIXES),
        "allowed_decorators": _names(allowed_decorators()),
        "module_methods": _names(sorted(gate_rules.MODULE_METHODS)),
        "mutators": _names(f".{name}()" for name in sorted(gate_rules.MUTATORS)),
        "native_rules": _reasons(native_examples()),
        "allowed_pragmas": _names(allowed_pragmas()),
        "symbols_allowed": _names(s for s in SYMBOLS_ALLOWED if _symbol_allowed(s)),
        "symbols_refused": _names(s for s in SYMBOLS_REFUSED if not _symbol_allowed(s)),
        "symbols_reason": "; ".join(symbols.symbol_problems(list(SYMBOLS_REFUSED[:1]))),
        "library_ops": _lines(
            f"{family}: {', '.join(sorted(ops))}"
            for family, ops in profiling.LIBRARY_FAMILIES.items()
        ),
        "layout_ops": _names(sorted(profiling.LAYOUT_OPS)),
        "build_flags": _names(alternatives(buildcache.ALLOWED_FLAG.pattern)),
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
    """Refused attribute names grouped by the gate's reason for refusing them."""
    grouped: dict[str, list[str]] = {}
    for name, why in gate_rules.FORBIDDEN_ATTRIBUTES.items():
        grouped.setdefault(why, []).append(f".{name}")
    for name in gate_rules.GLOBAL_STATE_ATTRIBUTES:
        grouped.setdefault(gate_rules.forbidden_name(name), []).append(f".{name}")
    # The two prefix rules of forbidden_name, in its own words.
    grouped.setdefault(gate_rules.forbidden_name("set_x"), []).append(".set_*")
    fine = [f"`.{name}`" for name in ("register_buffer", "register_parameter")]
    fine = [name for name in fine if not gate_rules.forbidden_name(name.strip("`."))]
    hooks = gate_rules.forbidden_name("register_x")
    grouped.setdefault(f"{hooks} ({' and '.join(fine)} are fine)" if fine else hooks, []).append(
        ".register_*"
    )
    return grouped


def native_examples() -> dict[str, list[str]]:
    """Kernel-source samples the native gate rejects, grouped by the gate's reason."""
    grouped: dict[str, list[str]] = {}
    for sample in NATIVE_SAMPLES:
        for reason in native_gate.check_native(sample, "float32"):
            names = grouped.setdefault(reason.split(": ")[0], [])
            if f"`{sample}`" not in names:
                names.append(f"`{sample}`")
    return grouped


def allowed_pragmas() -> list[str]:
    """The pragmas the native gate lets through, as ``#pragma`` lines."""
    single = [f"#pragma {name}" for name in sorted(native_directives.ALLOWED_PRAGMAS)]
    double = [
        f"#pragma {first} {second}"
        for first, seconds in sorted(native_directives.ALLOWED_SUB_PRAGMAS.items())
        for second in sorted(seconds)
    ]
    return single + double


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


def _symbol_allowed(name: str) -> bool:
    return not symbols.symbol_problems([name])


def _device_values(device: str) -> dict[str, str]:
    if device == "cuda":
        return {"cuda_utilities": _names(f"at::cuda::{n}" for n in native_gate.CUDA_UTILITIES)}
    threads_and_ops = symbols.aten_op_problems(["at::_ops::mm::call", "GOMP_parallel"])
    return {
        "cpu_flags": _names(buildcache.CPU_CFLAGS),
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
