"""The preprocessor's part of the native gate: directives, includes, pragmas, macros.

A kernel includes system and toolkit headers only: the header name must be a relative path of
plain components (no absolute path, no ``..``, no hidden names) that resolves to a file inside
the allowed include roots (the compiler's own directories, PyTorch's, Python's and the CUDA
toolkit's), so ``#include`` cannot print a file of the runner into the build log. The operand is
read as written, before macro expansion: ``#include MACRO`` is refused, as are the directives
and operators that test or read other files (``#include_next``, ``#embed``, ``__has_include``,
``#pragma GCC dependency``) and pragmas outside a short allow-list.
"""

from __future__ import annotations

import functools
import glob
import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from harness.static.native_lex import CONDITIONALS, Lexed, Token

ALLOWED_DIRECTIVES = CONDITIONALS | {"define", "undef", "include", "pragma", "error", "warning"}
HEADER_COMPONENT = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9_.+-]*")
# Headers of threads, files, sockets and PyTorch's distributed and serialization code.
DENIED_HEADERS = {
    r"thread|pthread\.h|future": "starts threads (work the timer cannot see)",
    r"fstream|filesystem|experimental/filesystem|fcntl\.h|sys/mman\.h|dirent\.h|sys/stat\.h|"
    r"torch/serialize\.h|torch/csrc/api/include/torch/serialize.*|caffe2/serialize/.*": (
        "touches files"
    ),
    r"sys/socket\.h|netinet/.*|arpa/.*|netdb\.h|sys/un\.h|sys/epoll\.h|"
    r"torch/csrc/distributed/.*|c10d/.*|gloo/.*|tensorpipe/.*|nccl\.h": (
        "reaches the network or PyTorch's distributed and RPC code"
    ),
}
# Pragmas a kernel uses; for GCC and clang the second word counts too. "GCC dependency" reads
# another file, which is why this is an allow-list.
ALLOWED_PRAGMAS = {
    "once", "omp", "unroll", "nounroll", "ivdep", "STDC", "pack", "message", "simd",
    "nv_diag_suppress", "nv_diag_default", "nv_diag_warning", "nv_diagnostic",
    "diag_suppress", "diag_default", "diag_warning",
}  # fmt: skip
ALLOWED_SUB_PRAGMAS = {
    "GCC": {"unroll", "ivdep", "optimize", "push_options", "pop_options", "diagnostic", "target"},
    "clang": {"loop", "diagnostic", "fp", "unroll"},
}
# Identifiers that test or read other files, or build pragmas the gate cannot read.
FILE_PROBES = {"__has_include", "__has_include_next", "__has_embed", "__FILE_NAME__"}
# Words a candidate may not #define or #undef: redefining them changes what every rule reads.
CPP_KEYWORDS = set(
    "alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t "
    "char16_t char32_t class compl concept const consteval constexpr constinit const_cast "
    "continue co_await co_return co_yield decltype default delete do double dynamic_cast else "
    "enum explicit export extern false float for friend goto if inline int long mutable "
    "namespace new noexcept not not_eq nullptr operator or or_eq private protected public "
    "register reinterpret_cast requires return short signed sizeof static static_assert "
    "static_cast struct switch template this thread_local throw true try typedef typeid "
    "typename union unsigned using virtual void volatile wchar_t while xor xor_eq".split()
) | {
    "__device__", "__host__", "__global__", "__constant__", "__managed__", "__shared__",
    "__forceinline__", "__attribute__", "__declspec", "__asm__", "__asm", "__volatile__",
    "__thread", "_Pragma", "defined", "__has_include", "__has_include_next", "__restrict__",
}  # fmt: skip


def directive_problems(lexed: Lexed) -> list[str]:
    """Reasons to refuse the source's directives, includes, pragmas and macro definitions."""
    reasons = []
    for name, line in lexed.directives:
        if name not in ALLOWED_DIRECTIVES:
            reasons.append(
                f"kernel source uses a directive the gate does not allow: #{name} (line {line})"
            )
    for include in lexed.includes:
        if include.directive == "include":
            reasons += header_problems(include.header, include.line)
    for tokens, line in lexed.pragmas:
        reasons += pragma_problems(tokens, line)
    reasons += _pragma_operator_problems(lexed.code)
    for token in lexed.all_tokens:
        if token.kind == "id" and token.text in FILE_PROBES:
            reasons.append(f"kernel source tests for other files: {token.text} (line {token.line})")
            break
    for macro in lexed.macros:
        if macro.name in CPP_KEYWORDS:
            reasons.append(
                f"kernel source redefines a keyword with a macro: {macro.name} (line {macro.line})"
            )
    return reasons


def header_problems(header: str, line: int) -> list[str]:
    """Why ``#include`` of ``header`` is refused; empty when it names an allowed header."""
    where = f"#include at line {line}"
    if not header:
        return [
            f"kernel source includes something other than a header name: {where} "
            '(write #include <name> or "name", not a macro)'
        ]
    if header.startswith("/"):
        return [f"kernel source includes an absolute path: {header!r} ({where})"]
    parts = header.split("/")
    if ".." in parts:
        return [f"kernel source includes a path with '..': {header!r} ({where})"]
    if not all(HEADER_COMPONENT.fullmatch(part) for part in parts):
        return [
            f"kernel source includes an oddly spelled path: {header!r} ({where}: plain names "
            "separated by '/' only)"
        ]
    for pattern, why in DENIED_HEADERS.items():
        if re.fullmatch(pattern, header):
            return [f"kernel source {why}: #include <{header}> (line {line})"]
    if resolve_header(header) is None:
        return [
            f"kernel source includes a header outside the system and toolkit include "
            f"directories: {header!r} ({where})"
        ]
    return []


def resolve_header(header: str) -> Path | None:
    """The file ``header`` names inside an allowed include root, or None."""
    for root in include_roots():
        candidate = (root / header).resolve()
        if candidate.is_file() and any(candidate.is_relative_to(r) for r in include_roots()):
            return candidate
    return None


@functools.cache
def include_roots() -> tuple[Path, ...]:
    """The compiler's system include directories, PyTorch's, Python's and CUDA's."""
    from torch.utils import cpp_extension  # the harness already depends on torch

    roots = [*_compiler_dirs(), *map(Path, cpp_extension.include_paths())]
    roots.append(Path(sysconfig.get_paths()["include"]))
    # The CUDA toolkit: where PyTorch finds it, or its usual places (a CPU build of PyTorch
    # finds none, but the gate still reads CUDA sources there).
    homes = [cpp_extension.CUDA_HOME, os.environ.get("CUDA_HOME"), *glob.glob("/usr/local/cuda*")]
    for home in filter(None, homes):
        roots += [Path(home, "include"), *map(Path, glob.glob(f"{home}/targets/*/include"))]
    return tuple(dict.fromkeys(root.resolve() for root in roots if root.is_dir()))


def _compiler_dirs() -> list[Path]:
    """The C++ compiler's own search list (``c++ -v``), or the usual system directories."""
    compiler = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if compiler is not None:
        run = subprocess.run(
            [compiler, "-xc++", "-E", "-v", os.devnull], capture_output=True, text=True
        )
        listing = run.stderr.partition("#include <...> search starts here:")[2]
        lines = listing.partition("End of search list.")[0].splitlines()
        dirs = [Path(line.strip()) for line in lines if line.strip().startswith("/")]
        if dirs:
            return dirs
    patterns = ["/usr/include", "/usr/local/include", "/usr/include/c++/*", "/usr/include/*-linux-gnu",
                "/usr/include/*-linux-gnu/c++/*", "/usr/lib/gcc/*/*/include"]  # fmt: skip
    return [Path(p) for pattern in patterns for p in glob.glob(pattern)]


def pragma_problems(tokens: list[Token], line: int) -> list[str]:
    words = [t.text for t in tokens[:2]]
    if not words:
        return []
    first = words[0]
    allowed = first in ALLOWED_PRAGMAS or (
        first in ALLOWED_SUB_PRAGMAS and len(words) > 1 and words[1] in ALLOWED_SUB_PRAGMAS[first]
    )
    if allowed:
        return []
    return [
        f"kernel source uses a pragma the gate does not allow: #pragma {' '.join(words)} (line {line})"
    ]


def _pragma_operator_problems(code: list[Token]) -> list[str]:
    """``_Pragma("...")`` is a #pragma too; its operand must be a literal the gate can read."""
    reasons = []
    for index, token in enumerate(code):
        if token.text != "_Pragma":
            continue
        operand = code[index + 1 : index + 4]
        if [t.text for t in operand[::2]] != ["(", ")"] or operand[1].kind != "str":
            reasons.append(
                f"kernel source builds a _Pragma the gate cannot read (line {token.line})"
            )
            continue
        text = re.sub(r'^(u8|[uUL])?"|"$', "", operand[1].text)
        words = [Token("id", w, token.line) for w in text.replace('\\"', '"').split()[:2]]
        reasons += pragma_problems(words, token.line)
    return reasons


def define_flag_problems(flags: list[str]) -> list[str]:
    """Reasons to refuse ``-D``/``-U`` build flags that redefine keywords (``-Dconstexpr=inline``
    would turn every immutable object the gate allowed into a mutable one)."""
    reasons = []
    for flag in flags:
        match = re.match(r"-[DU](\w+)", flag)
        if match and match.group(1) in CPP_KEYWORDS:
            reasons.append(f"build flag {flag!r} redefines the keyword {match.group(1)}")
    return reasons
