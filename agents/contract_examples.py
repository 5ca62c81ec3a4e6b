"""The spellings the contract shows as accepted or refused, each with the stage that decides.

A model that reads "✓ `cudaStream_t s = at::cuda::getCurrentCUDAStream(); k<<<g, b, 0, s>>>`"
writes it without a second thought, so every verdict shown must be the harness's own. Each
spelling names its stage: ``static`` (``harness.static.python``, before any code runs),
``native`` (``harness.static.native`` and the build-flag allow-list, when ``load_inline`` is
called), ``symbols`` (``harness.static.symbols``, the compiled objects) or ``run:<check>`` (a
check on real calls; the feedback names ``<check>``). Verdicts of the first three are
confirmed against the checks whenever the contract is made (one that no longer holds drops
out); tests/test_contract_examples.py feeds every spelling, the run-time ones included,
through the real checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from harness.builds import cache as buildcache
from harness.static import native as native_gate
from harness.static import python as python_gate
from harness.static import symbols

STAGES = ("static", "native", "symbols", "run")


@dataclass(frozen=True)
class Spelling:
    """One spelling the contract shows, with its verdict and where it is decided."""

    text: str  # as the contract shows it
    accepted: bool
    stage: str  # static | native | symbols | run:<check>; for an accepted one, the last it meets
    code: str = ""  # what the stage's check reads, when ``text`` is shorthand for it
    where: str = "forward"  # static: forward | init | module | class; native: body | file
    note: str = ""  # shown after the spelling

    @property
    def fed(self) -> str:
        return self.code or self.text

    def shown(self, stage: str = "") -> str:
        """``text`` and its note; the stage too where it is not ``stage``, the section's own."""
        note = f" {self.note}" if self.note else ""
        where = f" [{self.stage}]" if self.stage != stage and not self.accepted else ""
        return f"`{self.text}`{note}{where}"


# A candidate around one static spelling: the smallest module the Python gate passes.
CANDIDATE = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline
{module}
_ext = load_inline(name="kp_example", cpp_sources="", functions=["f"])


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3)
        {init}
{klass}
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        {forward}
        return _ext.f(y)
"""
# A kernel source around one native spelling: a kernel and the host function that launches it.
KERNEL_SOURCE = """{file}
__global__ void k(float* p) {{ p[threadIdx.x] = 0.0f; }}
void launch(float* p) {{
    const dim3 g(1), b(32);
    {body}
}}
"""


def candidate_with(spelling: Spelling) -> str:
    """The minimal candidate with a static ``spelling`` in its place."""
    places = {"module": "", "init": "pass", "class": "", "forward": "pass"}
    code = spelling.fed
    if spelling.where == "class":
        code = "\n".join(f"    {line}" for line in code.splitlines()) + "\n"
    places[spelling.where] = code
    return CANDIDATE.format(
        module=places["module"],
        init=places["init"],
        klass=places["class"],
        forward=places["forward"],
    )


def kernel_with(spelling: Spelling) -> str:
    """The minimal kernel source with a native ``spelling`` in its place."""
    places = {"file": "", "body": ""}
    code = spelling.fed if spelling.fed.rstrip().endswith((";", "}")) else spelling.fed + ";"
    places[spelling.where if spelling.where in places else "body"] = code
    return KERNEL_SOURCE.format(file=places["file"], body=places["body"])


def static_reasons(spelling: Spelling) -> list[str]:
    """What the stages before run time say about ``spelling`` (empty: all of them pass it)."""
    if spelling.stage == "symbols":
        return symbols.symbol_problems([spelling.fed])
    if spelling.fed.startswith("-"):
        return buildcache.flag_problems([spelling.fed])
    if spelling.where in ("body", "file"):
        return native_gate.check_native(kernel_with(spelling), "float32")
    return python_gate.check_python(candidate_with(spelling), "Model", "float32")


def holds(spelling: Spelling) -> bool:
    """Does the static stages' verdict match the one shown? Run-time verdicts are the tests'."""
    if spelling.stage.startswith("run"):
        return not static_reasons(spelling)  # refused later, so every static stage passes it
    return bool(static_reasons(spelling)) != spelling.accepted


def shown(spellings: Iterable[Spelling], stage: str = "") -> str:
    """The spellings whose verdict holds, as the contract lists them: the accepted ones after
    ✓, the refused ones after ✗, each refused one with its stage unless it is ``stage``."""
    held = [spelling for spelling in spellings if holds(spelling)]
    groups = [
        (mark, [s.shown(stage) for s in held if s.accepted == accepted])
        for mark, accepted in (("✓", True), ("✗", False))
    ]
    return "; ".join(f"{mark} {', '.join(items)}" for mark, items in groups if items)


def _s(
    text: str, accepted: bool, stage: str, code: str = "", where: str = "forward", note: str = ""
) -> Spelling:
    return Spelling(text, accepted, stage, code, where, note)


# Where a kernel launches: no gate reads the stream argument; running under a non-default
# current stream does (a launch on the legacy default stream races the caller's work).
STREAMS = (
    _s("k<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(p)", True, "run:stream_ordered",
       where="body"),
    _s("cudaStream_t s = at::cuda::getCurrentCUDAStream(); k<<<g, b, 0, s>>>(p)", True,
       "run:stream_ordered", where="body"),
    _s("k<<<g, b>>>(p)", False, "run:correct_outputs", where="body"),
    _s("cudaLaunchHostFunc(s, f, p)", False, "native", where="body"),
    _s("cudaMemcpy3DAsync", False, "symbols"),
)  # fmt: skip
# Writing the fused result in place into memory allocated during the call (a library op's
# output) is a new output; into an input, a view of one, or a buffer kept across calls is not.
IN_PLACE = (
    _s("y = self.conv(x); _ext.bias_relu_(y); return y", True, "run:fresh_outputs"),
    _s("_ext.relu_(x); return x", False, "run:no_input_alias"),
    _s("_ext.relu_(x.view(-1))", False, "run:inputs_unchanged"),
    _s("_ext.relu_(x.contiguous())", False, "run:inputs_unchanged"),
    _s("return _ext.f(x, self.out)", False, "run:fresh_outputs"),
)
# A library op counts by the aten op the profiler sees, not by how it is called.
LIBRARY_CALLS = (
    _s("self.conv(x)", True, "run:no_pytorch_compute"),
    _s("F.conv2d(x, self.conv.weight, self.conv.bias)", True, "run:no_pytorch_compute"),
    _s("torch.relu(y)", False, "run:no_pytorch_compute"),
    _s("y + self.conv.bias", False, "run:no_pytorch_compute"),
    _s("self.conv(self.conv(x))", False, "run:no_pytorch_compute"),
)
# The two prefix rules of ``harness.static.python_rules.forbidden_name``, in their real scope:
# attributes of anything but ``self``, and names imported from a module.
PREFIX_NAMES = (
    _s("torch.set_num_threads(1)", False, "static"),
    _s("y.register_hook(f)", False, "static", code="y.register_hook(print)"),
    _s("from torch import set_printoptions", False, "static", where="module"),
    _s("def set_scale(self, s): ...", True, "static",
       code="def set_scale(self, s):\n    return s", where="class"),
    _s("self.set_scale(2.0)", True, "static"),
    _s("self.register_buffer('s', t)", True, "static",
       code="self.register_buffer('s', torch.ones(1))", where="init", note="in `__init__`"),
    _s("self.register_buffer('s', t)", False, "static",
       code="self.register_buffer('s', torch.ones(1))", note="in `forward`"),
)  # fmt: skip
# Refused on every object, ``self`` included.
ANY_OWNER = (
    _s("self.load", False, "static", code="z = self.load"),
    _s("self.time", False, "static", code="z = self.time"),
    _s("self.use_tf32", False, "static", code="z = self.use_tf32"),
)
# The CUDA runtime calls a launch or a kernel's attributes need, and some that are refused.
CUDA_SYMBOLS = (
    _s("cudaLaunchKernel", True, "symbols"),
    _s("__cudaLaunchKernel", True, "symbols", note="(CUDA 13's `<<<>>>`)"),
    _s("cudaLaunchKernelExC", True, "symbols", note="(`cudaLaunchKernelEx`: clusters)"),
    _s("cudaLaunchCooperativeKernel", True, "symbols"),
    _s("cudaFuncSetAttribute", True, "symbols", note="(over 48 KB of dynamic shared memory)"),
    _s("cudaFuncGetAttributes", True, "symbols"),
    _s("cudaOccupancyMaxActiveBlocksPerMultiprocessor", True, "symbols"),
    _s("cudaDeviceGetAttribute", True, "symbols"),
    _s("cudaMemcpyAsync", True, "symbols"),
    _s("cudaMemsetAsync", True, "symbols"),
    _s("cudaEventRecord", True, "symbols"),
    _s("cudaStreamWaitEvent", True, "symbols"),
    _s("cublasSgemm_v2", True, "symbols"),
    _s("cudaFuncSetSharedMemConfig", False, "symbols"),
    _s("cudaDeviceSetLimit", False, "symbols"),
    _s("cudaDeviceSetCacheConfig", False, "symbols"),
    _s("cudaSetDeviceFlags", False, "symbols"),
    _s("cudaGetDriverEntryPoint", False, "symbols"),
    _s("cuTensorMapEncodeTiled", False, "symbols", note="(the driver API, `cu*`)"),
    _s("cudaMemcpyPeerAsync", False, "symbols"),
    _s("cublasSetMathMode", False, "symbols"),
)
CPU_SYMBOLS = (
    *(_s(name, True, "symbols") for name in (
        "memcpy", "malloc", "expf", "tanhf", "printf", "GOMP_parallel", "omp_get_thread_num",
    )),
    *(_s(name, False, "symbols") for name in (
        "sched_setaffinity", "setpriority", "nanosleep", "usleep", "clock_gettime", "signal",
        "pthread_create", "fopen", "socket", "fork", "syscall",
    )),
)  # fmt: skip
# Build flags that would pick the GPU architecture: the harness picks it (the device's own).
ARCH_FLAGS = (
    _s("-arch=sm_90a", False, "native"),
    _s("-gencode=arch=compute_90a,code=sm_90a", False, "native"),
    _s("--gpu-architecture=sm_90a", False, "native"),
)
TABLES = (STREAMS, IN_PLACE, LIBRARY_CALLS, PREFIX_NAMES, ANY_OWNER, CUDA_SYMBOLS, CPU_SYMBOLS,
          ARCH_FLAGS)  # fmt: skip
EVERY = tuple(spelling for table in TABLES for spelling in table)
