"""The build cache's folder: entries keyed by content, written only by the trusted side, verified
on every read, bounded in size.

An entry ``ROOT/KEY/`` holds a built library and ``manifest.json``: the SHA-256 of every file
in it, recorded by this process right after the compiler's process ended. A read re-hashes
every file and refuses an entry whose files differ from the manifest, lack one, or hold more
(an entry is then built again, never loaded): a library planted in the folder, or rewritten
after its build, is not loaded. Builds happen in a staging folder of their own and are moved
into place with one rename, so there is no lock to leave behind and two builds of one key never
share a folder; the first to land wins, the other is dropped.

Candidate workers see the cache read-only and ask the parent for builds (``harness.sandbox.run``
passes their "build" messages to ``BuildStore.library``); the compiler runs in a sandbox of its
own that runs no candidate code (``harness.builds.compile_worker``). Each trust level has its own root
(``cache_root``): a pull request's builds never reach the nightly job's.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from harness.builds.pch import ninja_command, pch_key

MANIFEST = "manifest.json"
STAGING = ".staging"


class BuildSpec(BaseModel):
    """One ``load_inline`` call as the gate let it through: what the compiler is given."""

    cpp: str
    cuda: str = ""
    functions: list[str] | None = None
    cflags: list[str] = Field(default_factory=list)
    cuda_flags: list[str] = Field(default_factory=list)
    ldflags: list[str] = Field(default_factory=list)
    device: str = "cpu"
    arch: str = Field(default="", description="TORCH_CUDA_ARCH_LIST on cuda, e.g. 9.0.")
    implicit_headers: bool = Field(
        default=True,
        description="load_inline puts torch's headers first in each source (False: the "
        "candidate passed no_implicit_headers=True and includes what it uses).",
    )


class Built(BaseModel):
    """A build's outcome: the library and its hash, or the compiler's words."""

    key: str
    library: Path | None = None
    sha256: str | None = None
    error: str | None = None


Compile = Callable[[BuildSpec, str, Path, Path | None], str | None]
"""``compile(spec, module_name, build_dir, pch)``: builds into ``build_dir`` (with the headers
precompiled in ``pch``, where given); the compiler's output when it failed, else None."""
Precompile = Callable[[str, list[str], Path], str | None]
"""``precompile(compiler, flags, folder)``: torch's headers precompiled into ``folder``
(``harness.builds.pch``); the compiler's output when it failed, else None."""
PCH_ROOT = ".pch"


class BuildStore:
    def __init__(
        self, root: Path, compile: Compile, max_bytes: int, precompile: Precompile | None = None
    ) -> None:
        """``precompile``: how torch's headers are precompiled for later builds (None: never;
        ``harness.builds.pch``)."""
        self.root, self.compile, self.max_bytes = root, compile, max_bytes
        self.precompile = precompile
        self._evicting = threading.Lock()
        self._precompiling = threading.Lock()
        self._headers: dict[str, tuple[int, int, int]] = {}  # verified: (inode, size, mtime)
        self._headers_failed: set[str] = set()  # keys whose precompiling failed: not retried

    def library(self, spec: BuildSpec, key: str) -> Built:
        """The verified library for ``spec`` (``key``: its ``build_key``), built if need be."""
        entry = self.root / key
        verified = self.verified(entry, key)
        if verified is not None:
            return verified
        if entry.exists():
            shutil.rmtree(entry, ignore_errors=True)  # not what was built here: built again
        (self.root / STAGING).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.root / STAGING))
        headers = self.headers(spec)
        try:
            error = self.compile(spec, f"kp_{key}", staging, headers)
            if error is not None:
                return Built(key=key, error=error)
            library = staging / f"kp_{key}.so"
            if not library.is_file():
                return Built(key=key, error=f"the build made no kp_{key}.so")
            if headers is None:
                self._precompile_like(spec, staging)
            _land(staging, entry)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        verified = self.verified(entry, key)
        if verified is None:
            return Built(key=key, error=f"the built entry {entry} did not verify")
        self.evict(keep=entry)
        return verified

    def verified(self, entry: Path, key: str) -> Built | None:
        """The entry's library if every file in it is the one its manifest recorded."""
        recorded = _as_recorded(entry)
        if recorded is None:
            return None
        library = entry / f"kp_{key}.so"
        if library.name not in recorded:
            return None
        os.utime(entry / MANIFEST)  # last use, for eviction
        return Built(key=key, library=library, sha256=recorded[library.name])

    def headers(self, spec: BuildSpec) -> Path | None:
        """The folder of torch's headers precompiled for ``spec``'s flags, verified against
        its manifest (hashed once per process, then checked by inode, size and time); None
        where there is none (yet) or it does not verify."""
        key = pch_key(spec) if self.precompile is not None else None
        if key is None:
            return None
        folder = self.root / PCH_ROOT / key
        try:
            stat = (folder / MANIFEST).stat()
        except OSError:
            return None
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._headers.get(key) != seen:
            if _as_recorded(folder) is None:
                return None
            self._headers[key] = seen
        return folder

    def _precompile_like(self, spec: BuildSpec, built: Path) -> None:
        """After a build without precompiled headers: precompile them with the flags that build
        used, for the builds after it. One at a time; a failure is kept, not retried, and
        never fails the build it followed."""
        precompile, key = self.precompile, pch_key(spec)
        if precompile is None or key is None or key in self._headers_failed:
            return
        if not self._precompiling.acquire(blocking=False):  # another thread is making them
            return
        try:
            command = ninja_command(built)
            if command is None or (self.root / PCH_ROOT / key).exists():
                return
            (self.root / PCH_ROOT / STAGING).mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f"{key}-", dir=self.root / PCH_ROOT / STAGING))
            try:
                if precompile(*command, staging) is not None:
                    self._headers_failed.add(key)
                    return
                _land(staging, self.root / PCH_ROOT / key)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
        finally:
            self._precompiling.release()

    def evict(self, keep: Path) -> None:
        """Least recently used entries out until the cache is within ``max_bytes``."""
        with self._evicting:
            entries = []
            for entry in self.root.iterdir():
                if entry.name in (STAGING, PCH_ROOT) or not entry.is_dir():
                    continue
                size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
                manifest = entry / MANIFEST
                used = manifest.stat().st_mtime if manifest.exists() else 0.0
                entries.append((used, size, entry))
            total = sum(size for _, size, _ in entries)
            for _, size, entry in sorted(entries, key=lambda item: item[0]):
                if total <= self.max_bytes:
                    break
                if entry != keep:
                    shutil.rmtree(entry, ignore_errors=True)
                    total -= size


def spec_key(spec: BuildSpec) -> str:
    """Everything that shapes the binary, hashed: the same build, wherever it is asked for."""
    payload = json.dumps(
        {
            "cpp": spec.cpp,
            "cuda": spec.cuda,
            "functions": spec.functions,
            "cflags": spec.cflags,
            "cuda_flags": spec.cuda_flags,
            "ldflags": spec.ldflags,
            "torch": torch.__version__,
            # Another install of the same version has other header paths in build.ninja:
            # sharing a directory would make ninja rebuild at each switch.
            "torch_dir": os.path.dirname(torch.__file__),
            "python": sys.version_info[:2],
            "device": spec.device,
            "arch": spec.arch,
            "implicit_headers": spec.implicit_headers,
            "machine": platform.machine(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:20]


def _hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file in ``folder`` (but the manifest), by path inside it."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            found[path.relative_to(folder).as_posix()] = "symlink"
        elif path.is_file() and path.name != MANIFEST:
            found[path.relative_to(folder).as_posix()] = file_sha256(path)
    return found


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _as_recorded(folder: Path) -> dict | None:
    """The hashes ``folder``'s manifest recorded, where every file in it still has them."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return recorded if isinstance(recorded, dict) and _hashes(folder) == recorded else None


def _land(staging: Path, entry: Path) -> None:
    """A finished staging folder, its hashes recorded, moved into place with one rename; where
    another build of the same key landed first, that one stays and is used."""
    _write_manifest(staging)
    try:
        os.rename(staging, entry)
    except OSError:
        pass


def _write_manifest(folder: Path) -> None:
    (folder / MANIFEST).write_text(json.dumps(_hashes(folder), sort_keys=True))
    os.utime(folder / MANIFEST, (time.time(), time.time()))
