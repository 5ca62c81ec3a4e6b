"""How a case's inputs reach a candidate: as PyTorch's stream semantics promise a caller.

A kernel must run after the work its caller already queued on the current stream and before
what the caller queues next, whatever stream is current. The harness checks that by running:
on cuda most cases run under a non-default current stream (a pool stream, which does not
wait for the legacy default stream nor it for them), and their inputs are still being produced
on it when forward is called: the stream first spins on the device for tens of milliseconds,
then copies the real values into input buffers that hold poison until then. A kernel that
does not wait for the current stream reads the poison; the outputs are then sampled on the
same stream right after return, with no host synchronization in between, so one that the
current stream does not wait for is caught still writing them. The stream gate
(``harness.workers.stream_hold``) makes that certain: work queued on any other stream waits until
those reads are done.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from harness.workers import guards
from harness.workers.stream_hold import Hold, StreamGate

# About 25-35 ms of a device-side spin at Hopper clocks: far longer than the host needs to go
# from queuing the input copies to the candidate's own launches, profiler and all.
BUSY_CYCLES = 50_000_000
# How long a stream hold waits for the spin above and the input copies to finish before it
# starts counting the call's own time (generous: a slower GPU spins longer).
BUSY_ALLOWANCE_S = 0.5

STREAM_HINT = (
    "launch kernels on at::cuda::getCurrentCUDAStream() (or make your own streams wait for the "
    "current stream before they start, and the current stream wait for them before forward "
    "returns)"
)


class Staged:
    """A case's inputs, staged for one call: ``originals`` hold the real values (never handed
    to the candidate), ``produce()`` gives what the candidate is called with."""

    def __init__(self, raw: list, device: str, async_stream: bool) -> None:
        self.originals = [guards.guarded(x, device) if _tensor(x) else x for x in raw]
        self.stream: torch.cuda.Stream | None = None
        self.inputs_ready: torch.cuda.Event | None = None
        if async_stream and device == "cuda":
            self.inputs = [guards.poisoned_like(x) if _tensor(x) else x for x in self.originals]
            self._load_kernels()
            torch.cuda.synchronize()  # the poison is in place before the stream runs
            self.stream = torch.cuda.Stream(priority=-1)  # its sample read goes first
        else:
            self.inputs = [guards.guarded(x) if _tensor(x) else x for x in self.originals]

    @contextlib.contextmanager
    def current_stream(self) -> Iterator[None]:
        """The case's current stream: a busy non-default one, or the one there is."""
        if self.stream is None:
            yield
            return
        with torch.cuda.stream(self.stream):
            yield

    def _load_kernels(self) -> None:
        """Run each kernel ``produce`` uses once, now: CUDA loads a kernel lazily at its first
        launch, and loading may wait for the device to go idle, which would let the busy
        stream finish before the candidate is called."""
        torch.cuda._sleep(1)
        for target, original in zip(self.inputs, self.originals, strict=True):
            if _tensor(target):
                target.copy_(original)  # this layout's copy kernel
                target.fill_(guards.guard_fill(target))  # poison again

    def produce(self) -> list:
        """The inputs for the call; on a busy stream, still being copied in when it starts."""
        if self.stream is not None:
            torch.cuda._sleep(BUSY_CYCLES)
            for target, original in zip(self.inputs, self.originals, strict=True):
                if _tensor(target):
                    target.copy_(original)
            self.inputs_ready = torch.cuda.Event()
            self.inputs_ready.record(self.stream)
        return self.inputs

    @contextlib.contextmanager
    def held(self, gate: StreamGate | None, limit_s: float) -> Iterator[Hold | None]:
        """Around the call and the harness's first reads of its outputs: work queued on other
        streams than the case's busy one is held back until ``Hold.wait_then_release`` (or the
        end of the block). No hold without a gate or a busy stream."""
        if gate is None or self.stream is None or self.inputs_ready is None:
            yield None
            return
        hold = gate.hold(self.stream, self.inputs_ready, limit_s, BUSY_ALLOWANCE_S)
        try:
            yield hold
        finally:
            hold.release()


def timing_stream(device: str, rep: int) -> contextlib.AbstractContextManager:
    """Every other timed call runs under a non-default current stream (cuda)."""
    if device != "cuda" or rep % 2 == 0:
        return contextlib.nullcontext()
    return torch.cuda.stream(torch.cuda.Stream())


def _tensor(value) -> bool:
    return isinstance(value, torch.Tensor)
