"""Build every CUDA candidate on a machine with nvcc but no GPU: compile errors and gate
rejections show up here, before any GPU time is spent.

Each candidate is imported in its own process under the harness's own loader (the same
flags, sources, static gate and symbol allow-list as on a GPU), with the arch given here.
A CPU build of torch has no CUDA libraries to link against, so --link-dir must hold stand-ins
(empty libc10_cuda.so and libtorch_cuda.so, and libcublas for kernels that call cuBLAS); the
library is then built and checked but not loaded. A minimal CUDA toolkit may lack the
cuBLAS/cuSPARSE/cuSOLVER headers that ATen/cuda/CUDAContext.h includes: --cuda-include adds
them (from the nvidia-cublas, nvidia-cusparse, nvidia-cusolver wheels: nvidia/cu13/include).

    python bench/cuda_build_check.py --cuda-include DIR --link-dir DIR [--arch 9.0] [--jobs 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from harness import buildcache  # noqa: E402
from harness.gate import GateRejection, check_python  # noqa: E402


def check_one(candidate: Path, arch: str, include: str, link_dir: str, cache: Path) -> dict:
    """Import one candidate under the harness loader; its kernels are built, not loaded."""
    from torch.utils import cpp_extension

    cpp_extension.CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    real_load_inline = buildcache._load_inline

    def build_with_headers(**kwargs):
        kwargs["extra_include_paths"] = [include]
        kwargs["extra_ldflags"] = [*kwargs["extra_ldflags"], f"-L{link_dir}"]
        return real_load_inline(**kwargs)

    buildcache._load_inline = build_with_headers
    # Built and checked, never loaded: a CPU torch cannot load a CUDA library.
    buildcache._load_library = lambda module_name, library: object()
    loader = buildcache.CachedLoader(cache, "cuda", "float32", arch=arch)
    cpp_extension.load_inline = loader  # type: ignore[assignment]
    spec = importlib.util.spec_from_file_location("kp_candidate", candidate)
    assert spec is not None and spec.loader is not None
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except GateRejection as err:
        return {"status": "rejected", "detail": str(err)}
    except buildcache.BuildFailed as err:
        return {"status": "build_error", "detail": str(err)[-3000:]}
    return {"status": "built", "detail": f"{len(loader.builds)} extension(s)"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cuda-include", required=True, help="extra CUDA library headers")
    parser.add_argument("--link-dir", required=True, help="stand-in CUDA libraries of torch")
    parser.add_argument("--arch", default="9.0", help="compute capability [9.0: H100/H200]")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "kp-cuda-check")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(
            json.dumps(check_one(args.one, args.arch, args.cuda_include, args.link_dir, args.cache))
        )
        return 0

    from cuda_candidates import cuda_candidates

    work = Path(tempfile.mkdtemp(prefix="kp-cuda-check-"))
    jobs = []
    for target, entries in cuda_candidates().items():
        for number, (label, candidate) in enumerate(entries):
            class_name = "Model" if ":" not in target else target.split(":")[1]
            reasons = check_python(candidate.source, class_name, "float32")
            path = work / f"{Path(target.split(':')[0]).stem}_{number}.py"
            path.write_text(candidate.source)
            jobs.append((label, path, reasons))

    def run(job):
        label, path, reasons = job
        if reasons:
            return label, {"status": "rejected", "detail": "; ".join(reasons)}
        command = [sys.executable, __file__, "--one", str(path), "--arch", args.arch]
        command += ["--cuda-include", args.cuda_include, "--link-dir", args.link_dir]
        command += ["--cache", str(args.cache)]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            return label, {"status": "crashed", "detail": (done.stdout + done.stderr)[-3000:]}
        return label, json.loads(lines[-1])

    started = time.monotonic()
    counts: dict[str, int] = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for label, outcome in pool.map(run, jobs):
            counts[outcome["status"]] = counts.get(outcome["status"], 0) + 1
            print(f"{outcome['status']:12s} {label}: {outcome['detail'][:300]}", flush=True)
            if outcome["status"] in ("build_error", "crashed"):
                print(outcome["detail"], flush=True)
    print(f"{counts} in {time.monotonic() - started:.0f} s (arch {args.arch})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
