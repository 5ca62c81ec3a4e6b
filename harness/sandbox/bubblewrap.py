"""The sandbox every process that runs pull-request or candidate code starts in (bubblewrap).

A worker sees: the system's programs and libraries read-only (``/usr``, ``/etc``, ...), this
Python and kernelpilot read-only, the paths its job names (the problem's checkout read-only,
its own job folder writable), a private ``/tmp``, ``/dev`` with the device nodes of the GPU it
is pinned to (``harness.gpus``; every GPU's where it is not) and nothing else of the machine:
not the runner's home, tool cache, ``RUNNER_TEMP`` or the Actions file-command files. It runs
in new user, PID, network, IPC and UTS namespaces: it cannot see or signal other processes (the
parent's ``/proc`` entries included), reach the network, or outlive its sandbox
(``--die-with-parent``; the PID namespace ends with it).

``bwrap`` comes from the distribution (Debian and Ubuntu: ``apt-get install bubblewrap``) and
needs unprivileged user namespaces, or root. Where it cannot start, ``check`` raises
``SandboxUnavailable`` naming what is missing: never a silent downgrade. ``--sandbox off``
(``KERNELPILOT_SANDBOX=off``) runs workers without it, for trusted code only.
"""

from __future__ import annotations

import ctypes
import functools
import os
import shutil
import site
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from harness import gpus
from harness.errors import UserError
from harness.records import Problem

Isolation = Literal["bubblewrap", "off"]
BWRAP_VARIABLE = "KERNELPILOT_BWRAP"  # another bwrap than the one on PATH
PRIVATE_TMP = Path("/tmp")  # a fresh tmpfs in every sandbox: nothing of the machine's
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
PR_SET_DUMPABLE = 4
INSTALL_FIX = (
    "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install "
    "bubblewrap), or set KERNELPILOT_BWRAP to its path. Only for trusted code: --sandbox off "
    "(refused for pull requests from forks)"
)


class SandboxUnavailable(UserError):
    """The sandbox cannot be set up on this machine."""


class WorkerView(BaseModel):
    """What one worker may see of the file system, besides the system and this Python."""

    read_only: list[Path] = Field(default_factory=list, description="Bound read-only.")
    writable: list[Path] = Field(default_factory=list, description="Bound read-write.")
    gpu: bool = Field(default=False, description="Bind the GPU's device nodes.")


def problem_view(problem: Problem, *extra_read_only: Path, writable: list[Path] | None = None,
                 gpu: bool | None = None) -> WorkerView:  # fmt: skip
    """What a worker for ``problem`` sees: its checkout read-only (the reference's file, the
    input factory's, the folders its imports come from), plus ``extra_read_only``."""
    read_only = [problem.source_path.parent, *problem.search_paths, *extra_read_only]
    for path in (problem.inputs_path, problem.init_path, problem.init_capture):
        if path is not None:
            read_only.append(path.parent)
    return WorkerView(
        read_only=read_only,
        writable=list(writable or []),
        gpu=problem.device == "cuda" if gpu is None else gpu,
    )


def bwrap_path() -> str:
    chosen = os.environ.get(BWRAP_VARIABLE) or shutil.which("bwrap")
    if not chosen or not os.access(chosen, os.X_OK):
        raise SandboxUnavailable(
            "the sandbox for pull-request and candidate code needs bubblewrap (bwrap), "
            "which is not installed" + (f" at {chosen}" if chosen else " (not on PATH)"),
            where="this machine",
            fix=INSTALL_FIX,
        )
    return chosen


@functools.cache
def check(bwrap: str) -> None:
    """Start one empty sandbox the way workers are started; SandboxUnavailable with bwrap's
    own words when this machine does not allow it (no user namespaces, a seccomp filter)."""
    command = [*base_arguments(bwrap, WorkerView()), "--", "/bin/true"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SandboxUnavailable(
            f"bubblewrap could not be run: {err}", where=bwrap, fix=INSTALL_FIX
        ) from None
    if done.returncode != 0:
        raise SandboxUnavailable(
            f"bubblewrap cannot set up a sandbox here: {done.stderr.strip()[-500:]}",
            where=bwrap,
            fix="allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; "
            "on Ubuntu 24.04 also kernel.apparmor_restrict_unprivileged_userns=0, or an "
            "AppArmor profile for bwrap), or run the runner as root; " + INSTALL_FIX,
        )


def wrap(argv: list[str], view: WorkerView, env: dict[str, str], cwd: Path) -> list[str]:
    """``argv`` as a command that runs it inside a new sandbox with exactly ``env``."""
    bwrap = bwrap_path()
    check(bwrap)
    protect_this_process()
    command = base_arguments(bwrap, view, gpus.device_minors(env.get(gpus.VISIBLE)))
    command += ["--chdir", str(cwd), "--clearenv"]
    for name, value in sorted(env.items()):
        command += ["--setenv", name, value]
    return [*command, "--", *argv]


def base_arguments(bwrap: str, view: WorkerView, minors: set[int] | None = None) -> list[str]:
    """bwrap's options for ``view``; ``minors``: the GPUs whose device nodes it shows (the
    driver's own nodes always), None for every GPU's."""
    command = [
        bwrap,
        "--die-with-parent",
        "--new-session",  # no TIOCSTI into the terminal kernelpilot runs in
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--tmpfs",
        str(PRIVATE_TMP),
    ]
    read_only = [Path(d) for d in SYSTEM_DIRS] + python_paths() + list(view.read_only)
    for path in _outermost(p for p in read_only if p not in view.writable):
        command += ["--ro-bind-try", str(path), str(path)]
    if Path("/sys").is_dir():
        command += ["--ro-bind", "/sys", "/sys"]  # device topology for CUDA; no secrets
    for path in _outermost(view.writable):
        command += ["--bind", str(path), str(path)]
    if view.gpu:
        for node in gpu_nodes(minors):
            target = Path("/dev") / node.name  # where a worker finds it, wherever it was found
            command += ["--dev-bind", str(node), str(target)]
    return command


DEV = Path("/dev")  # where the GPUs' device nodes are found (a test's own folder in tests)


def gpu_nodes(minors: set[int] | None) -> list[Path]:
    """The NVIDIA device nodes a GPU worker is shown. Pinned to GPUs (``minors``): theirs
    (``nvidiaN``) and the ones CUDA needs beside them (``DRIVER_NODES``); not the other GPUs',
    nor the MIG capabilities, display or NVSwitch nodes. Not pinned (None): every one."""
    kept = []
    for node in sorted(DEV.glob("nvidia*")):
        if minors is None or node.name in DRIVER_NODES or _gpu_minor(node) in minors:
            kept.append(node)
    return kept


def _gpu_minor(node: Path) -> int | None:
    """N of a GPU's node ``nvidiaN``; None for any other node."""
    number = node.name.removeprefix("nvidia")
    return int(number) if number.isdigit() else None


# What a CUDA process opens beside its GPUs' nodes: the control node, unified memory, and the
# profiler's counters (CUPTI, for the kernel breakdowns).
DRIVER_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools")


def python_paths() -> list[Path]:
    """This interpreter, its libraries and kernelpilot's own code: read-only in every worker."""
    project = Path(__file__).resolve().parents[2]
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix), project}
    paths.add(Path(os.path.realpath(sys.executable)).parent)
    paths.update(Path(entry) for entry in site.getsitepackages())
    for entry in sys.path:
        if entry and os.path.isabs(entry) and os.path.exists(entry) and entry != os.getcwd():
            paths.add(Path(entry))
    for name in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(name):
            paths.add(Path(os.environ[name]))
    paths.update(toolchain_prefixes())
    if sys.pycache_prefix:  # compiled bytecode kept apart from the sources: read, never written
        paths.add(Path(sys.pycache_prefix))
    # Where a path is reached through a link (a virtual environment linked into a checkout),
    # what it points to is bound too: a link alone leads nowhere in the sandbox.
    paths |= {Path(os.path.realpath(path)) for path in paths}
    # Neither a Python installed at the root (prefix "/") nor a search path at or above /tmp (a
    # script started from /tmp puts its folder first) may show the sandbox the machine's files
    # over its private /tmp: the whole machine, or every other job's scratch.
    return sorted(path for path in paths if not PRIVATE_TMP.is_relative_to(path))


TOOLS = ("c++", "g++", "cc", "gcc", "nvcc", "ninja")
TOOL_VARIABLES = ("CXX", "CC", "CUDAHOSTCXX", "NVCC_CCBIN")


def toolchain_prefixes() -> set[Path]:
    """The installation folders of the compilers a build uses (``CXX`` and the others, and
    those on PATH): a compiler outside the system folders (``/opt/gcc/bin/g++``) needs its
    whole prefix, its libraries and headers too."""
    named = [os.environ.get(name, "").split()[0] for name in TOOL_VARIABLES if os.environ.get(name)]
    found = [shutil.which(tool) for tool in [*named, *TOOLS]]
    prefixes = set()
    for tool in filter(None, found):
        binary = Path(os.path.realpath(tool))
        prefixes.add(binary.parent.parent if binary.parent.name == "bin" else binary.parent)
    return {prefix for prefix in prefixes if prefix != Path("/")}


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """Absolute, existing paths with those inside another one dropped (a bind of a folder
    already shows what is inside it), in a stable order. Not resolved: ``/bin`` bound where it
    is a link to ``usr/bin`` is a folder at ``/bin`` in the sandbox, as scripts expect."""
    resolved = sorted({Path(os.path.abspath(p)) for p in paths if Path(p).exists()})
    kept: list[Path] = []
    for path in resolved:
        if not any(path.is_relative_to(outer) for outer in kept):
            kept.append(path)
    return kept


def protect_this_process() -> None:
    """No process of this user can read this one's memory or ``/proc`` entries (environ,
    mem, fds): the LLM key and tokens live here. Sandboxed workers are in other namespaces
    already; this also covers anything else the job started as the same user."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
