"""A CUDA runtime and driver that run on no device (fake_cuda.c), a kernel library that calls
them (candidate.c), and a way to run Python with the stream gate preloaded over them: the
stream gate's own logic, tested on a CPU (tests/test_stream_gate.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _cc(*args: str) -> None:
    compiler = os.environ.get("CC") or "cc"
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", *args], check=True)


def build(folder: Path) -> Path:
    """libcuda.so.1, libcudart.so.13, libcandidate.so and a stand-in of PyTorch's caching
    allocator (libc10_cuda_allocator.so) in ``folder``."""
    source = str(HERE / "fake_cuda.c")
    _cc("-DFAKE_DRIVER", "-Wl,-soname,libcuda.so.1", "-o", str(folder / "libcuda.so.1"), source)
    _cc(
        "-Wl,-soname,libcudart.so.13",
        "-o",
        str(folder / "libcudart.so.13"),
        source,
        f"-L{folder}",
        "-l:libcuda.so.1",
    )
    _cc(
        "-o",
        str(folder / "libcandidate.so"),
        str(HERE / "candidate.c"),
        f"-L{folder}",
        "-l:libcudart.so.13",
        f"-Wl,-rpath,{folder}",
    )
    _cc(
        "-o",
        str(folder / "libc10_cuda_allocator.so"),
        str(HERE / "allocator.c"),
        f"-L{folder}",
        "-l:libcudart.so.13",
        f"-Wl,-rpath,{folder}",
    )
    return folder


PRELUDE = """
import ctypes, json, sys, time
folder, gate_path = sys.argv[1], sys.argv[2]
candidate = ctypes.CDLL(folder + "/libcandidate.so")  # private, as Python loads extensions
driver = ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
driver.fake_log.restype = ctypes.c_char_p
driver.fake_stream_ready.argtypes = [ctypes.c_void_p]
driver.fake_event_ready.argtypes = [ctypes.c_void_p]
gate = ctypes.CDLL(gate_path)
gate.kp_gate_hold.argtypes = [ctypes.c_size_t, ctypes.c_double]
gate.kp_gate_counts.argtypes = [ctypes.POINTER(ctypes.c_long)]
gate.kp_gate_error.restype = ctypes.c_char_p
gate.kp_gate_counts.restype = None
allocator = ctypes.CDLL(folder + "/libc10_cuda_allocator.so")
allocator.allocator_query.argtypes = [ctypes.c_void_p]
one = ("launch", "launch_per_thread", "launch_classic", "sync_stream", "destroy", "query_stream",
       "sync_event", "query_event", "free_memory", "destroy_event")
for name in one:
    getattr(candidate, name).argtypes = [ctypes.c_void_p]
for name in ("record", "wait_event"):
    getattr(candidate, name).argtypes = [ctypes.c_void_p, ctypes.c_void_p]
candidate.copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
candidate.copy_sync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
candidate.wait_event_flags.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
said = {}
def counts():
    out = (ctypes.c_long * 4)()
    gate.kp_gate_counts(out)
    return dict(zip(("waits", "streams", "imprecise", "failures"), out))
def ready(*streams):
    return [driver.fake_stream_ready(s) for s in streams]
assert gate.kp_gate_init() == 0, gate.kp_gate_error()
driver.fake_clear()
"""


@dataclass
class Run:
    log: list[str]
    said: dict


def run(folder: Path, gate: Path, scenario: str) -> Run:
    """Run ``scenario`` (Python, with ``candidate``, ``gate``, ``counts()`` and a ``said``
    dict to fill) in a fresh process with ``gate`` preloaded; the fake CUDA's call log and
    ``said`` come back."""
    code = (
        PRELUDE
        + textwrap.dedent(scenario)
        + "\nprint(json.dumps([driver.fake_log().decode(), said]))\n"
    )
    env = {**os.environ, "LD_PRELOAD": str(gate), "LD_LIBRARY_PATH": str(folder)}
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(gate)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    log, said = json.loads(done.stdout.strip().splitlines()[-1])
    return Run(log=[line for line in log.splitlines() if line], said=said)
