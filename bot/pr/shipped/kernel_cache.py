"""The drop-in's build cache: ``load_inline``, served by the content hash of what it builds.

Why: the verified kernel file calls ``load_inline`` when it is imported (or when its ``ModelNew``
is built), and ``load_inline`` runs ninja and the compiler's version check on its first call in
every process, even when its build folder already holds the library: torch remembers what it
built in memory only (``_jit_compile`` in ``torch/utils/cpp_extension.py``; pytorch/pytorch#68066
and #124454). Imported as it is, every process that ran the kernel would need a compiler and
ninja, and would fail without them.

While the drop-in imports the verified file and builds its ``ModelNew``, ``load_inline`` stands in
for a cache keyed by the content hash of everything that shapes the library: its arguments,
torch, python, the machine, the GPUs' archs on cuda, the processor for ``-march=native``. An
entry is a folder under ``$TORCH_EXTENSIONS_DIR/kernelpilot`` (torch's own extensions folder,
per machine and user), built by torch in a staging folder and renamed into place whole, with a
record of its library's hash, checked on every load (an entry that fails it is built again). A
later process finds the entry and loads the library itself: no compiler, no ninja. The verified
file stays byte for byte what was verified.

Everything from the marker on goes into the shipped runtime (``bot.pr.dropin``); the imports
above it are merged.
"""

# kernelpilot: shipped imports
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import inspect
import json
import os
import platform
import re
import shutil
import sysconfig
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

# kernelpilot: shipped code
_CACHE_FORMAT = 1
_NOT_SHAPING = ("build_directory", "verbose", "keep_intermediates")
_LOCK = threading.RLock()
_LOADED: dict[str, Any] = {}  # cache key -> the extension module loaded in this process
_ENTRIES: dict[Path, bool] = {}  # cache folders used in this process -> built by it


def _cache_root() -> Path:
    """Per machine and user: torch's own extensions folder, under kernelpilot/."""
    from torch.utils import cpp_extension

    root = os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()
    return Path(root) / "kernelpilot"


@contextlib.contextmanager
def _cached_load_inline() -> Any:
    """While held, ``torch.utils.cpp_extension.load_inline`` is served from the cache."""
    from torch.utils import cpp_extension

    with _LOCK:
        current = cpp_extension.load_inline
        real = getattr(current, "_kernelpilot_real", current)  # another drop-in's, nested
        cpp_extension.load_inline = _CachedLoadInline(real)  # type: ignore[assignment]
        try:
            yield
        finally:
            cpp_extension.load_inline = current


class _CachedLoadInline:
    """What the verified file calls as ``load_inline`` (it keeps the name it imported, so calls
    from its constructor later come here too)."""

    def __init__(self, real: Any) -> None:
        self._kernelpilot_real = real

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        real = self._kernelpilot_real
        signature = inspect.signature(real)
        if "no_implicit_headers" not in signature.parameters:
            # torch before 2.8: its headers go first in each source, which sources that include
            # what they use still build with (kernelpilot's CUDA kernels are written so)
            kwargs.pop("no_implicit_headers", None)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        if not arguments.get("is_python_module", True):
            return real(*args, **kwargs)  # a library for torch.ops, which torch loads itself
        key = _cache_key(arguments)
        with _LOCK:
            if key not in _LOADED:
                _LOADED[key] = _load_or_build(real, arguments, _cache_root() / key)
            return _LOADED[key]


def _cache_key(arguments: dict) -> str:
    """The content hash of everything that shapes the library."""
    shaping = {name: value for name, value in arguments.items() if name not in _NOT_SHAPING}
    flags = json.dumps([shaping.get("extra_cflags"), shaping.get("extra_cuda_cflags")])
    cuda = bool(shaping.get("cuda_sources") or shaping.get("with_cuda"))
    identity = {
        "format": _CACHE_FORMAT,
        "arguments": shaping,
        "torch": [torch.__version__, torch.version.git_version, torch.version.cuda],
        "python": sysconfig.get_config_var("EXT_SUFFIX"),
        "machine": platform.machine(),
        "cuda_archs": _cuda_archs() if cuda else None,
        "cpu": _cpu_identity() if "native" in flags else None,
    }
    text = json.dumps(identity, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _cuda_archs() -> list[str]:
    """What torch compiles for: TORCH_CUDA_ARCH_LIST, else the visible GPUs' capabilities."""
    listed = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if listed:
        return sorted({arch for arch in re.split(r"[;,\s]+", listed) if arch})
    if not torch.cuda.is_available():
        return []
    count = torch.cuda.device_count()
    return sorted({"{}.{}".format(*torch.cuda.get_device_capability(i)) for i in range(count)})


def _cpu_identity() -> str:
    """For -march=native builds: the processor, so that a cache in a home folder shared by
    several machines never hands one machine's instructions to another."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    keys = ("model name", "flags", "Features", "CPU part")
    lines = sorted({line for line in text.splitlines() if line.startswith(keys)})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _load_or_build(real: Any, arguments: dict, folder: Path) -> Any:
    module = _load_entry(folder)
    if module is None:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(folder.parent / f"{folder.name}.lock"):
            module = _load_entry(folder)  # another process may have built it meanwhile
            if module is None:
                module = _build_entry(real, arguments, folder)
                _ENTRIES[folder] = True
    _ENTRIES.setdefault(folder, False)
    return module


def _load_entry(folder: Path) -> Any:
    """The entry's library, loaded; None where there is none, or where it fails its hash check
    (it is built again)."""
    try:
        record = json.loads((folder / "kernel.json").read_text())
        library = folder / record["library"]
        matches = record["key"] == folder.name and _sha256(library) == record["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not matches:
        return None
    spec = importlib.util.spec_from_file_location(record["module"], library)
    if spec is None or spec.loader is None:
        raise ImportError(f"{library} cannot be loaded as a Python extension")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build_entry(real: Any, arguments: dict, folder: Path) -> Any:
    """Built by torch in a staging folder of its own, then renamed into place whole."""
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        # load_inline appends to the lists it is given: copies, so the key stays as computed.
        options = {name: list(v) if isinstance(v, list) else v for name, v in arguments.items()}
        module = real(**{**options, "build_directory": str(staging)})
        library = Path(module.__file__)
        record = {"key": folder.name, "module": module.__name__, "library": library.name}
        record["sha256"] = _sha256(library)
        (staging / "kernel.json").write_text(json.dumps(record))
        staging.chmod(0o755)  # mkdtemp's 0o700 would hide an image's build from its users
        if folder.exists():
            shutil.rmtree(folder)  # an entry that failed its check
        os.replace(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return module


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def _file_lock(path: Path) -> Any:
    """One build of a key at a time on this machine (the ranks of a job start together); the
    lock goes with the process that held it."""
    try:
        import fcntl
    except ImportError:  # not a POSIX system: each build stages its own folder, one wins
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
