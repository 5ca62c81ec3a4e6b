"""Precompiled torch headers for candidate builds: ``torch/extension.h`` compiled once per
machine and flag set, not once per candidate.

A CPU candidate's C++ translation unit is mostly torch's headers: on a 2-core machine 54 s of
a 55 s build, 19 s with the header precompiled (the precompiled header itself takes 75 s, once);
on a 16-core machine 21.9 s, 15.4 s (bench/BENCHMARKS.md, "builds"). A CUDA candidate's C++
file (its bindings, and its host code where its ``.cu`` file has none of torch's headers) is
served the same way. nvcc cannot take a GCC precompiled header, so a ``.cu`` file that includes
torch's headers still costs what it did (26.5 s without, 28.6 s with: the C++ file beside it
was not the long pole).
torch's own ``use_pch`` keeps one header in site-packages that any build without it deletes, so
builds running side by side would race on it; this one lives in the build cache instead, under
``.pch/KEY/``, made by the trusted side only (``harness.builds.store``: from kernelpilot's own
one-line header and the flags torch's first build of that kind used, never a candidate's source),
hash-checked before a build uses it, and given to the compiler's sandbox read-only.

Only builds with the base host flags use one (a candidate's ``-D``/``-U``/``-std`` flags change
what the header means; those build as before), and of a candidate that includes its own headers
(``no_implicit_headers``) only a C++ file that begins with the header's line. The header goes
in with ``-include``: where GCC finds the precompiled file unusable it reads the header as
text, so a build never depends on the precompiled one being right, only its time does.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the store imports this module
    from harness.builds.store import BuildSpec

HEADER = "kp_torch.h"
HEADER_LINE = "#include <torch/extension.h>\n"  # the header's one line, as load_inline puts it
NINJA_FILE = "build.ninja"
# Fixed on cpu, whatever the candidate asks (it may only ask for allowed flags): the same
# candidate then always hashes to the same build (harness.builds.cache), and a spec with exactly
# these has no flag of the candidate's that could change what the header means.
CPU_CFLAGS = ["-O3", "-fopenmp", "-march=native", "-fno-math-errno", "-fno-trapping-math"]
CUDA_HOST_CFLAGS = ["-O3"]  # a CUDA build's C++ file; the candidate's nvcc flags are its own
BASE_CFLAGS = {"cpu": CPU_CFLAGS, "cuda": CUDA_HOST_CFLAGS}


def pch_key(spec: BuildSpec) -> str | None:
    """The precompiled header ``spec`` can use, by its device and flags and this torch and
    Python; None where the candidate added host flags of its own, or where its C++ file does not
    begin with what the header holds: with ``no_implicit_headers`` it may define a macro before
    torch's headers, or not include them at all, and the build would then depend on the header."""
    if spec.cflags != BASE_CFLAGS.get(spec.device):
        return None
    if not spec.implicit_headers and not spec.cpp.lstrip().startswith(HEADER_LINE):
        return None
    payload = json.dumps(
        [torch.__version__, os.path.dirname(torch.__file__), sys.version_info[:2], spec.device,
         spec.cflags, os.environ.get("CXX", "c++")]
    )  # fmt: skip
    return "pch-" + hashlib.sha256(payload.encode()).hexdigest()[:16]


def include_flags(folder: Path) -> list[str]:
    """What a build adds to its host flags to use the header precompiled in ``folder``."""
    return ["-include", str(folder / HEADER)]


def ninja_command(build_dir: Path) -> tuple[str, list[str]] | None:
    """The compiler and host flags torch's build of ``build_dir`` compiled its C++ with (from
    its ``build.ninja``), its module's name left out: the header is precompiled with exactly
    these, or GCC would not use it. None where the build wrote no such file."""
    try:
        lines = (build_dir / NINJA_FILE).read_text().splitlines()
    except OSError:
        return None
    values = dict(line.split(" = ", 1) for line in lines if " = " in line and line[:1] != " ")
    if "cxx" not in values or "cflags" not in values:
        return None
    flags = shlex.split(values["cflags"]) + shlex.split(values.get("post_cflags", ""))
    flags = [flag for flag in flags if not flag.startswith("-DTORCH_EXTENSION_NAME=")]
    return values["cxx"], flags


def precompile(compiler: str, flags: list[str], folder: Path) -> str | None:
    """Compile the header into ``folder`` (``HEADER`` and ``HEADER.gch``); the compiler's
    output where it failed."""
    (folder / HEADER).write_text(HEADER_LINE)
    command = [*shlex.split(compiler), "-x", "c++-header", HEADER, "-o", f"{HEADER}.gch", *flags]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        return f"precompiling torch's headers failed:\n{(done.stdout + done.stderr)[-2000:]}"
    return None
