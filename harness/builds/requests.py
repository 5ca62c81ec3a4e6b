"""The parent's side of a candidate worker's builds.

A candidate worker sees the build cache read-only: each ``load_inline`` it makes becomes a
"build" message, answered here. The request is untrusted (the candidate's code runs in that
worker), so it is gated again, its key is computed here, and the compiler runs in a sandbox of
its own (``harness.builds.compile_worker``) that runs no candidate code; the library lands in the
cache with its hashes recorded (``harness.builds.store``).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from pydantic import ValidationError

from harness.builds.cache import (
    HAS_NO_IMPLICIT_HEADERS,
    cuda_flag_problems,
    flag_problems,
    spec_key,
)
from harness.builds.compile_worker import CompileJob
from harness.builds.store import BuildSpec, BuildStore, Built
from harness.sandbox import lifetime
from harness.sandbox.bubblewrap import Isolation, WorkerView
from harness.sandbox.run import run_worker
from harness.static.native import check_native

ARCH = re.compile(r"^\d{1,2}\.\d{1,2}a?(\+PTX)?$")


class ParentBuilder:
    def __init__(
        self,
        cache_dir: Path,
        isolation: Isolation,
        timeout_s: float,
        max_bytes: int,
        progress: Callable[[str], None] | None = None,
        precompiled_headers: bool = False,
    ) -> None:
        """``precompiled_headers``: precompile torch's headers after the first build of a kind,
        for the builds after it (``harness.builds.pch``)."""
        self.isolation, self.timeout_s = isolation, timeout_s
        self.progress = progress or (lambda message: None)
        precompile = self._precompile if precompiled_headers else None
        self.store = BuildStore(cache_dir, self._compile, max_bytes, precompile)

    def answer(self, body: object, device: str, dtype: str) -> dict:
        """A worker's build request, answered with a ``Built`` record (as JSON)."""
        try:
            spec = BuildSpec.model_validate(body)
        except ValidationError as err:
            built = Built(key="", error=f"a malformed build request: {err.errors()[0]['msg']}")
        else:
            reasons = self.problems(spec, device, dtype)
            if reasons:
                built = Built(key="", error="refused: " + "; ".join(reasons))
            else:
                built = self.store.library(spec, spec_key(spec))
        return built.model_dump(mode="json")

    @staticmethod
    def problems(spec: BuildSpec, device: str, dtype: str) -> list[str]:
        reasons = []
        if spec.device != device:
            reasons.append(f"a build for {spec.device} in a problem on {device}")
        if spec.cuda and device != "cuda":
            reasons.append(f"builds CUDA sources but the problem runs on {device}")
        if device == "cuda" and not ARCH.match(spec.arch):
            reasons.append(f"an architecture that is not one: {spec.arch[:40]!r}")
        reasons += check_native(spec.cpp + "\n" + spec.cuda, dtype)
        reasons += flag_problems([*spec.cflags, *spec.cuda_flags, *spec.ldflags])
        reasons += cuda_flag_problems(spec.cuda_flags)
        if not spec.implicit_headers and not HAS_NO_IMPLICIT_HEADERS:
            reasons.append(
                f"no_implicit_headers: load_inline of torch {torch.__version__} has none"
            )
        return reasons

    def _compile(
        self, spec: BuildSpec, module_name: str, build_dir: Path, headers: Path | None
    ) -> str | None:
        self.progress(f"compiling kernel module {module_name} (at most {self.timeout_s:.0f} s)")
        job = CompileJob(spec=spec, module_name=module_name, build_dir=build_dir, headers=headers)
        return self._run(
            job, WorkerView(writable=[build_dir], read_only=[headers] if headers else [])
        )

    def _precompile(self, compiler: str, flags: list[str], folder: Path) -> str | None:
        self.progress(
            f"precompiling torch's headers for the next builds (at most {self.timeout_s:.0f} s)"
        )
        job = CompileJob(spec=None, build_dir=folder, precompile=(compiler, flags))
        return self._run(job, WorkerView(writable=[folder]))

    def _run(self, job: CompileJob, view: WorkerView) -> str | None:
        """The compiler's worker for ``job``, in a sandbox that sees ``view``."""
        job_dir = lifetime.scratch("compile-")
        try:
            (job_dir / "job.json").write_text(job.model_dump_json())
            outcome = run_worker(
                job_dir,
                self.timeout_s,
                None,
                view,
                self.isolation,
                entry="harness.builds.compile_worker",
                pausable=True,  # stopped while a candidate is timed (harness.sandbox.quiet)
            )
        finally:
            shutil.rmtree(job_dir, ignore_errors=True)
        if outcome.timed_out:
            return f"the build took longer than {self.timeout_s:.0f} s"
        results = outcome.results()
        if (
            len(results) != 1
            or results[0].kind != "report"
            or not isinstance(results[0].body, dict)
        ):
            return f"the compiler's worker ended without a report:\n{outcome.log_tail}"
        error = results[0].body.get("error")
        return None if error is None else str(error)
