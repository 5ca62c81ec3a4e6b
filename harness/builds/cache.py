"""Building candidates' kernels: ``load_inline`` behind a content-hash cache and a call counter.

Inside a worker, ``torch.utils.cpp_extension.load_inline`` is replaced by ``CachedLoader``:
it gates the sources and flags, and asks its builder for the library of a key hashed from
everything that shapes the binary (sources, functions, flags, torch version, device and arch),
so a repeated candidate is never rebuilt; the returned module counts calls into each compiled
function (launch evidence). In a candidate worker the builder is the parent, which builds in a
sandbox of its own and keeps the cache (``harness.builds.store``). The library's hash is checked
against the one recorded at build time, and its objects (``harness.static.symbols``), before it is
loaded: loading runs its static initializers, which are the candidate's code too.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import torch
from torch.utils import cpp_extension

from harness.builds.pch import CPU_CFLAGS, CUDA_HOST_CFLAGS, include_flags, precompile
from harness.builds.store import BuildSpec, BuildStore, Built, file_sha256, spec_key
from harness.sandbox.environment import tools_first
from harness.static.native import check_native
from harness.static.native_directives import define_flag_problems
from harness.static.python import GateRejection
from harness.static.symbols import object_problems

CPU_LDFLAGS = ["-fopenmp"]
CUDA_BASE_FLAGS = ["-O3"]
SOURCE_FLAGS = ("-D", "-U", "-std")  # host flags kept from the candidate: defines, the standard
ALLOWED_FLAG = re.compile(
    r"^(-O[0-3s]|-std=[\w+]+|-D\w+(=[\w.]+)?|-U\w+|-ffast-math|-funroll-loops|-fopenmp|"
    r"-fno-math-errno|-fno-trapping-math|-ftree-vectorize|-ffp-contract=\w+|-m[\w=.-]+|"
    r"-march=native|-lineinfo|--use_fast_math|-use_fast_math|--expt-relaxed-constexpr|"
    r"--extended-lambda|-Xptxas=-v|-Xptxas=-O3|-lgomp|-lcublas|-lcublasLt|-g)$"
)


# Held before a worker swaps ``cpp_extension.load_inline`` for a CachedLoader.
_load_inline = cpp_extension.load_inline
# Whether load_inline can leave torch's headers out of the sources (torch >= 2.8): a .cu file
# without them compiles in seconds (bench/BENCHMARKS.md, "Candidate builds").
HAS_NO_IMPLICIT_HEADERS = "no_implicit_headers" in inspect.signature(_load_inline).parameters


class BuildFailed(Exception):
    """The compiler said no; the message holds its output."""


class CachedLoader:
    """A drop-in ``load_inline`` for candidates; one per worker process."""

    def __init__(
        self,
        cache_dir: Path,
        device: str,
        dtype: str,
        arch: str | None = None,
        builder: Builder | None = None,
    ) -> None:
        """``arch`` (e.g. "9.0") defaults to the visible GPU's compute capability on cuda.
        ``builder`` gets each build: in a worker, the parent's (``harness.builds.store``: the
        cache is read-only there); else one that builds in this process into ``cache_dir``."""
        self.cache_dir = cache_dir
        self.device = device
        self.dtype = dtype
        self.calls: Counter[str] = Counter()
        self.builds: list[str] = []
        self.builder = builder or local_builder(cache_dir)
        os.environ["PATH"] = tools_first(os.environ.get("PATH", ""))  # as in every worker
        if device == "cuda":
            if arch is None:
                major, minor = torch.cuda.get_device_capability()
                arch = f"{major}.{minor}"
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch

    def __call__(
        self,
        name: str,
        cpp_sources,
        cuda_sources=None,
        functions=None,
        extra_cflags=None,
        extra_cuda_cflags=None,
        extra_ldflags=None,
        no_implicit_headers=False,
        **_ignored,
    ):
        cpp = _joined(cpp_sources)
        cuda = _joined(cuda_sources)
        if cuda and self.device != "cuda":
            raise GateRejection([f"builds CUDA sources but the problem runs on {self.device}"])
        reasons = check_native(cpp + "\n" + cuda, self.dtype)
        flags = [*(extra_cflags or []), *(extra_cuda_cflags or []), *(extra_ldflags or [])]
        reasons += flag_problems(flags)
        reasons += cuda_flag_problems(list(extra_cuda_cflags or []))
        if reasons:
            raise GateRejection(reasons)
        if isinstance(functions, str):
            functions = [functions]
        # Of the candidate's host flags only those that change what the source means stay.
        defines = [f for f in extra_cflags or [] if f.startswith(SOURCE_FLAGS)]
        if self.device == "cpu":
            cflags, cuda_flags, ldflags = [*CPU_CFLAGS, *defines], [], CPU_LDFLAGS
        else:
            cflags = [*CUDA_HOST_CFLAGS, *defines]
            cuda_flags = [*CUDA_BASE_FLAGS, *(extra_cuda_cflags or [])]
            ldflags = list(extra_ldflags or [])
        if no_implicit_headers and not HAS_NO_IMPLICIT_HEADERS:
            raise BuildFailed(
                f"load_inline of torch {torch.__version__} has no no_implicit_headers argument "
                "(torch 2.8 added it): leave it out, and torch's headers are put first"
            )
        spec = _spec(cpp, cuda, functions, cflags, cuda_flags, ldflags, self.device,
                     implicit_headers=not no_implicit_headers)  # fmt: skip
        return CountingModule(self._build(spec), self.calls)

    def _build(self, spec: BuildSpec):
        key = spec_key(spec)
        self.builds.append(key)
        built = self.builder(spec, key)
        if built.error is not None or built.library is None:
            raise BuildFailed(built.error or "no library")
        # The builder verified the entry; this process checks the file it is about to load.
        if file_sha256(built.library) != built.sha256:
            raise BuildFailed(f"{built.library} changed after its build was verified")
        reasons = check_binary(built.library)
        if reasons:
            raise GateRejection(reasons)
        return _load_library(f"kp_{key}", built.library)


Builder = Callable[[BuildSpec, str], Built]
DEFAULT_CACHE_BYTES = 20 * 2**30


def local_builder(cache_dir: Path, max_bytes: int = DEFAULT_CACHE_BYTES) -> Builder:
    """Builds in this process into ``cache_dir``: for code that trusts what it builds (tests,
    benchmarks of kernels of our own); workers that run candidates ask their parent instead."""
    from harness.builds.compile_worker import compile_here

    return BuildStore(cache_dir, compile_here, max_bytes, precompile).library


def flag_problems(flags: list[str]) -> list[str]:
    """Reasons to refuse build flags: not on the allow-list, or redefining a keyword."""
    refused = [
        f"build flag {flag!r} is not allowed" for flag in flags if not ALLOWED_FLAG.match(flag)
    ]
    return refused + define_flag_problems(flags)


def cuda_flag_problems(cuda_flags: list[str]) -> list[str]:
    """Reasons to refuse nvcc flags that would take the architecture out of the harness's
    hands: torch adds this GPU's ``-gencode`` only when no nvcc flag contains "arch" (a
    ``-Dmy_arch`` too), and nvcc then builds for its own default instead."""
    return [
        f"build flag {flag!r} in extra_cuda_cflags names 'arch': the harness builds for this "
        "GPU's own architecture, and torch would then leave it out"
        for flag in cuda_flags
        if "arch" in flag
    ]


def build_library(
    spec: BuildSpec, module_name: str, build_dir: Path, headers: Path | None = None
) -> Path:
    """Compile ``spec`` into ``build_dir`` without loading it; the library's path. Raises
    what ``load_inline`` raises when the compiler says no. ``headers``: a folder of torch's
    headers precompiled for these flags (``harness.builds.pch``)."""
    # No use_pch: torch keeps one precompiled header in site-packages and deletes it
    # whenever any load_inline call runs without use_pch, so builds would race on it.
    cflags = [*spec.cflags, *(include_flags(headers) if headers is not None else [])]
    implicit = {} if spec.implicit_headers else {"no_implicit_headers": True}
    with _build_only():
        library = _load_inline(
            name=module_name,
            cpp_sources=[spec.cpp],
            cuda_sources=[spec.cuda] if spec.cuda else None,
            functions=spec.functions,
            extra_cflags=cflags,  # a list of its own: load_inline appends to the lists it gets
            extra_cuda_cflags=list(spec.cuda_flags) or None,
            extra_ldflags=list(spec.ldflags),
            build_directory=str(build_dir),
            with_cuda=bool(spec.cuda),
            verbose=False,
            **implicit,
        )
    return Path(library)


_original_import = cpp_extension._import_module_from_library
_build_only_lock = threading.Lock()
_build_only_depth = 0


def _library_path(module_name: str, path: str, is_python_module: bool) -> str:
    return os.path.join(path, f"{module_name}{cpp_extension.LIB_EXT}")


@contextmanager
def _build_only():
    """While held, ``load_inline`` builds and returns the library's path without loading it.

    Counted, not nested: builds run in parallel threads in the parent process.
    """
    global _build_only_depth
    with _build_only_lock:
        if _build_only_depth == 0:
            cpp_extension._import_module_from_library = _library_path
        _build_only_depth += 1
    try:
        yield
    finally:
        with _build_only_lock:
            _build_only_depth -= 1
            if _build_only_depth == 0:
                cpp_extension._import_module_from_library = _original_import


def _load_library(module_name: str, library: Path):
    """Import a built (and checked) extension, as ``load_inline`` itself would have."""
    spec = importlib.util.spec_from_file_location(module_name, library)
    if spec is None or spec.loader is None:
        raise BuildFailed(f"{library} is not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class CountingModule:
    """Exposes a compiled module's functions, counting every call (launch evidence)."""

    def __init__(self, module, calls: Counter[str]) -> None:
        functions = {
            name: getattr(module, name) for name in dir(module) if not name.startswith("_")
        }

        def counted(name, function):
            def call(*args, **kwargs):
                calls[name] += 1
                return function(*args, **kwargs)

            return call

        for name, function in functions.items():
            if callable(function):
                object.__setattr__(self, name, counted(name, function))


def check_binary(library: Path) -> list[str]:
    """Reasons to reject the built extension, from the objects it was linked from."""
    return object_problems(sorted(library.parent.glob("*.o")))


def build_key(cpp, cuda, functions, cflags, cuda_flags, ldflags, device) -> str:
    """The cache key of a build in this process (the arch from TORCH_CUDA_ARCH_LIST)."""
    return spec_key(_spec(cpp, cuda, functions, cflags, cuda_flags, ldflags, device))


def _spec(
    cpp, cuda, functions, cflags, cuda_flags, ldflags, device, implicit_headers=True
) -> BuildSpec:
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST", "") if device == "cuda" else ""
    return BuildSpec(
        cpp=cpp, cuda=cuda, functions=functions, cflags=list(cflags),
        cuda_flags=list(cuda_flags), ldflags=list(ldflags), device=device, arch=arch,
        implicit_headers=implicit_headers,
    )  # fmt: skip


def _joined(sources) -> str:
    if sources is None:
        return ""
    if isinstance(sources, str):
        return sources
    return "\n".join(sources)


def default_cache_dir() -> Path:
    base = os.environ.get("KERNELPILOT_CACHE") or Path.home() / ".cache" / "kernelpilot"
    return Path(base) / "build"
