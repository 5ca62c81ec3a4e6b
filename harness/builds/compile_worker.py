"""The compiler's worker: ``python -m harness.builds.compile_worker JOB_DIR FD``.

Builds one ``load_inline`` call (``BuildSpec``) into the build folder its job names, in a
sandbox that sees that folder, the toolchain and the precompiled torch headers (read-only) only,
and reports the compiler's output; or precompiles torch's headers (``harness.builds.pch``). It
imports no candidate code and loads nothing it built: what lands in the build cache is what
the compiler made of sources the gate let through (``harness.builds.store``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from harness.builds.pch import precompile
from harness.builds.store import BuildSpec


class CompileJob(BaseModel):
    spec: BuildSpec | None = Field(description="What to build; None: precompile the headers.")
    module_name: str = ""
    build_dir: Path
    headers: Path | None = Field(default=None, description="Precompiled headers to build with.")
    precompile: tuple[str, list[str]] | None = Field(
        default=None, description="The compiler and flags to precompile torch's headers with."
    )


def compile_here(
    spec: BuildSpec, module_name: str, build_dir: Path, headers: Path | None = None
) -> str | None:
    """Build ``spec`` into ``build_dir`` in this process; the compiler's output if it failed."""
    from harness.builds.cache import build_library  # torch's extension machinery: imported late

    if spec.device == "cuda":
        os.environ["TORCH_CUDA_ARCH_LIST"] = spec.arch
    try:
        build_library(spec, module_name, build_dir, headers)
    except (RuntimeError, OSError, ImportError) as err:
        return str(err)
    return None


def main(job_dir: Path, channel_fd: int) -> None:
    channel = os.fdopen(channel_fd, "w")
    job = CompileJob.model_validate_json((job_dir / "job.json").read_text())
    if job.spec is not None:
        error = compile_here(job.spec, job.module_name, job.build_dir, job.headers)
    elif job.precompile is not None:
        error = precompile(*job.precompile, job.build_dir)
    else:
        error = "a compile job with nothing to compile"
    channel.write(json.dumps({"kind": "report", "body": {"error": error}}) + "\n")
    channel.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
