"""The stream gate: work a candidate queues on other streams waits until the harness has read.

PyTorch's stream semantics ask a kernel to finish its work before what the caller queues next
on the current stream. The checks' read of a call's outputs is what the caller queues next, so
a kernel that leaves work running on a stream the current stream does not wait for is caught
only if that work is still writing when the read runs: a race the harness won for large
kernels and lost for kernels of a few microseconds that had finished by then.

The gate takes the race away. Its C part (``native/``), preloaded into the checks' worker on
cuda, sees every kernel launch, copy and cuBLAS or cuDNN stream change; while a hold is on it
queues a wait on a word of its own (page-locked host memory the CPU writes) before the first
such work on any stream other than the caller's, and follows the joins (events recorded on
held streams, streams made to wait for them). After forward returns the harness queues its
reads of the outputs on the current stream, lets go exactly what that stream was made to wait
for, waits for the reads, and only then releases the rest (``Hold.wait_then_release``). Work
the current stream waits for is read finished; work it does not wait for has not run when the
reads run, so they see the poison the outputs were allocated over, every time.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import torch

NATIVE = Path(__file__).with_name("native")
SOURCES = [NATIVE / "stream_gate.c", NATIVE / "stream_gate_calls.c"]
HEADER = NATIVE / "stream_gate.h"
PATH_VARIABLE = "KERNELPILOT_STREAM_GATE"
# More hardware queues than the default 8: a held stream sharing one with the caller's stream
# would hold the caller's stream up too, and its check would fall back to the race.
MAX_CONNECTIONS = "32"


def build(cache_dir: Path, strict: bool = False) -> Path:
    """The compiled gate library, built once per source into ``cache_dir`` (``strict``: with
    warnings as errors, as the tests build it)."""
    source = b"".join(path.read_bytes() for path in [*SOURCES, HEADER])
    name = f"stream_gate-{hashlib.sha256(source).hexdigest()[:16]}{'-strict' if strict else ''}.so"
    target = cache_dir / "stream_gate" / name
    if any(character in str(target) for character in " :"):  # LD_PRELOAD splits on them
        target = Path(tempfile.gettempdir()) / f"kernelpilot-{os.getuid()}" / name
    if target.is_file():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError(
            "a C compiler (cc or gcc) is needed to build the harness's stream gate on cuda: "
            "install one, or set CC"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Its own name per build: threads of one process (several GPUs) may build it at once.
    handle, name = tempfile.mkstemp(prefix=f".{target.stem}-", suffix=".tmp", dir=target.parent)
    os.close(handle)
    partial = Path(name)
    command = [compiler, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra"]
    command += ["-Werror"] if strict else []
    command += ["-o", str(partial), *map(str, SOURCES), "-ldl", "-lpthread"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"building the stream gate failed ({' '.join(command)}):\n{done.stderr}")
    partial.replace(target)  # atomic: workers building at once each rename a whole file
    return target


def worker_environment(cache_dir: Path) -> dict[str, str]:
    """What the checks' worker's environment gains on cuda: the gate, preloaded."""
    library = str(build(cache_dir))
    return {
        "LD_PRELOAD": library,
        PATH_VARIABLE: library,
        "CUDA_DEVICE_MAX_CONNECTIONS": MAX_CONNECTIONS,
    }


class StreamGate:
    """The preloaded gate, in the worker that preloaded it, and what it did there."""

    def __init__(self, library: ctypes.CDLL) -> None:
        self.library = library
        self.setup_failure = ""
        self.held_calls = self.conclusive = self.imprecise = self.timed_out = 0
        self.streams_held = 0
        self.failures: list[str] = []
        self.last_conclusive = False
        library.kp_gate_init.restype = ctypes.c_int
        library.kp_gate_interposes.restype = ctypes.c_int
        library.kp_gate_error.restype = ctypes.c_char_p
        library.kp_gate_hold.argtypes = [ctypes.c_size_t, ctypes.c_double]
        library.kp_gate_counts.argtypes = [ctypes.POINTER(ctypes.c_long)]

    @classmethod
    def in_this_process(cls) -> StreamGate | None:
        """The gate, set up on the device; None where the worker runs without one (cpu, or
        ``eval.stream_gate = false``). Its children (compilers) do not inherit the preload.
        A gate that cannot work here (a driver without stream memory operations) holds
        nothing and says why in the stream-order check (``summary``)."""
        path = os.environ.pop(PATH_VARIABLE, None)
        os.environ.pop("LD_PRELOAD", None)
        if path is None:
            return None
        gate = cls(ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW))
        if not gate.library.kp_gate_interposes():
            raise RuntimeError(
                f"the stream gate {path} is loaded but does not interpose CUDA calls"
            )
        torch.cuda.init()
        if gate.library.kp_gate_init() != 0:
            gate.setup_failure = gate.error()
        return gate

    def usable(self) -> bool:
        return not self.setup_failure

    def error(self) -> str:
        return (self.library.kp_gate_error() or b"").decode(errors="replace")

    def hold(
        self,
        stream: torch.cuda.Stream,
        inputs_ready: torch.cuda.Event,
        limit_s: float,
        busy_s: float,
    ) -> Hold:
        """Hold back work queued on any stream other than ``stream`` (the call's current
        stream, busy producing the inputs until ``inputs_ready``, for up to ``busy_s``) until
        the hold is released; ``limit_s``: how long the caller's stream may take after that,
        its waits opened, before the hold is called inconclusive."""
        return Hold(self, stream, inputs_ready, limit_s, busy_s)

    def unverifiable(self) -> str:
        """Why no held call tested the candidate; empty if one did (or none was held).

        A held call proves nothing when the candidate let its own held work go before forward
        returned (a query of it), or when the caller's stream did not finish with its joins let
        go (a dependency made where the gate cannot follow it), or when the gate could not
        hold its work: a case after such a call is held again, and a candidate none of whose
        held calls was a test cannot be said to follow stream order."""
        if not self.usable() or not self.held_calls or self.conclusive:
            return ""
        causes = []
        if self.imprecise:
            causes.append(
                f"{self.imprecise} let its held work go early (a query, or a wait the gate cannot follow)"
            )
        if self.timed_out:
            causes.append(
                f"{self.timed_out} left the caller's stream waiting for held work it never "
                "joined in a way the gate follows"
            )
        if self.failures:
            causes.append(
                f"in {len(self.failures)} the gate could not hold its work ({self.failures[0]})"
            )
        return (
            f"none of the {self.held_calls} calls with other streams held could check stream "
            f"order: {'; '.join(causes)}"
        )

    def summary(self) -> str:
        """What the gate did over this worker's checked calls, for the check's detail."""
        if not self.usable():
            return f"; the stream gate is off here ({self.setup_failure}): other streams raced"
        if not self.held_calls:
            return ""
        text = f"; other streams held in {self.held_calls} calls ({self.conclusive} conclusive"
        if self.streams_held:
            text += f", {self.streams_held} stream(s) held"
        if self.timed_out:
            text += f", {self.timed_out} timed out"
        if self.imprecise:
            text += f", {self.imprecise} let go early by the candidate's own calls"
        if self.failures:
            text += f"; the gate failed: {self.failures[0]}"
        return text + ")"


class Hold:
    """One checked call's hold; released by ``wait_then_release`` (or ``release``)."""

    def __init__(
        self,
        gate: StreamGate,
        stream: torch.cuda.Stream,
        inputs_ready: torch.cuda.Event,
        limit_s: float,
        busy_s: float,
    ) -> None:
        self.gate, self.stream, self.inputs_ready = gate, stream, inputs_ready
        self.limit_s, self.busy_s = limit_s, busy_s
        self._released = False
        self._finished = False
        gate.library.kp_gate_hold(stream.cuda_stream, 2 * (busy_s + limit_s) + 1.0)

    def forward_returned(self) -> None:
        """From now on what opens for a blocking call is not the candidate's wait."""
        self.gate.library.kp_gate_forward_returned()

    def wait_then_release(self) -> None:
        """The harness's reads of the outputs are queued on the current stream: let go what
        that stream was made to wait for (the candidate's joins), wait for the reads, and only
        then release the rest. Work the current stream waits for is read finished; work it does
        not wait for has not run when the reads run."""
        done = torch.cuda.Event()
        done.record(self.stream)
        self.gate.library.kp_gate_open_callers_waits()
        _wait_for(self.inputs_ready, self.busy_s + self.limit_s)  # recorded before the hold
        self._finished = _wait_for(done, self.limit_s)
        self.release()

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        gate = self.gate
        gate.library.kp_gate_release()
        counts = (ctypes.c_long * 4)()
        gate.library.kp_gate_counts(counts)
        _, streams, imprecise, failures = counts
        gate.held_calls += 1
        gate.streams_held += streams
        gate.imprecise += bool(imprecise)
        gate.timed_out += not self._finished
        if failures:
            gate.failures.append(gate.error())
        gate.last_conclusive = self._finished and not imprecise and not failures
        gate.conclusive += gate.last_conclusive


def _wait_for(event: torch.cuda.Event, limit_s: float) -> bool:
    """Poll ``event`` for at most ``limit_s``; whether it completed."""
    deadline = time.monotonic() + limit_s
    while not event.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True
