"""The static gate for kernel sources (C++ and CUDA handed to load_inline).

Scanned as text with comments (and, for most rules, string literals) removed: threads, files,
processes, host callbacks, the Python interpreter, operator registration, profiler switches,
ATen kernels called around the dispatcher, caches in static storage, token pasting, inline
assembly that leaves the kernel, and reduced precision in a float32 problem. The built
library's imported symbols are checked after the build (``harness.symbols``), which no
spelling of the source can hide from.
"""

from __future__ import annotations

import re

# Conversions into reduced precision and tensor-core/TF32 modes. Half and bfloat16 *types* are
# fine (dtype dispatch needs them); the tolerance check catches values that went through them.
LOW_PRECISION_NATIVE = (
    r"\b(kHalf|kBFloat16|__float2half\w*|__float22half\w*|__float2bfloat16\w*|__floats2half\w*|"
    r"__floats2bfloat16\w*|wmma|mma\.sync|tf32\w*|TF32\w*|cublasSetMathMode|"
    r"CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST_\w+|allow_tf32)\b"
)
# at::cuda:: helpers that honest kernels use: streams, guards, device properties, cuBLAS handles.
CUDA_UTILITIES = [
    "getCurrentCUDAStream",
    "getStreamFromPool",
    "getDefaultCUDAStream",
    "CUDAStream",
    "CUDAStreamGuard",
    "OptionalCUDAGuard",
    "CUDAGuard",
    "OptionalCUDAStreamGuard",
    "getCurrentDeviceProperties",
    "getDeviceProperties",
    "getCurrentCUDABlasHandle",
    "getCurrentCUDABlasLtHandle",
    "CUDAEvent",
    "blas",
    "warp_size",
    "stream_synchronize",
]
FORBIDDEN_NATIVE = {
    r"\bstd::thread\b|\bstd::jthread\b|<thread>": "starts threads (work the timer cannot see)",
    r"\bpthread_create\b|<pthread\.h>": "starts threads (work the timer cannot see)",
    r"\bstd::async\b|<future>": "starts asynchronous work the timer cannot see",
    r"\b(fork|vfork|system|popen|execv\w*|execl\w*|dlopen|dlsym)\s*\(": "runs or loads programs",
    r"\b(fopen|ifstream|ofstream|open)\s*\(": "touches files",
    r"\bcudaLaunchHostFunc\b|\bcudaStreamAddCallback\b": "runs host callbacks off the stream",
    r"\bstatic\b[^;(){}]*\b(at::Tensor|torch::Tensor|Tensor|std::\w*map|std::\w*set|"
    r"std::vector|std::deque|std::list)\b[^;(){}]*\w+\s*(;|=|\{)": (
        "keeps tensors or caches in static storage (state across calls)"
    ),
    r"\bstatic\b\s+(thread_local\s+)?(std::atomic<\w+>|int|long|size_t|int64_t|unsigned|"
    r"bool|uint64_t|float|double)\s+\w+\s*(=|;)": "keeps a static counter or flag across calls",
    r"\bat::(cpu|native|_ops|meta|redispatch|compositeexplicitautograd\w*|"
    r"compositeimplicitautograd\w*)\b|\bnamespace\s+(cpu|native|_ops|redispatch)\b|"
    r"c10::Dispatcher|\bredispatch\b|ATen/(CPUFunctions|CUDAFunctions|RedispatchFunctions|"
    r"native/|ops/\w+_(native|cpu_dispatch|cuda_dispatch))": (
        "calls ATen kernels directly, around the dispatcher and the profiler"
    ),
    r"\bat::cuda::(?!("
    + "|".join(CUDA_UTILITIES)
    + r")\b)\w+\s*\(": "calls ATen CUDA kernels directly, around the dispatcher and the profiler",
    r"RecordFunction|DispatchKeyGuard|AutoDispatchBelow\w*|AutoNonVariableTypeMode|"
    r"enableRecordFunction|ThreadLocalStateGuard|\b(disable|reenable|remove|clear)\w*Callbacks?\b|"
    r"\badd(Global|ThreadLocal)Callback\b": "switches off dispatch or profiling hooks",
    r"\bTORCH_LIBRARY\w*|\btorch::Library\b|\bRegisterOperators\b": (
        "registers operators (it could replace PyTorch's own kernels)"
    ),
    r"\bgetenv\b|\bclock_gettime\b|\bgettimeofday\b|\bstd::chrono\b": "looks at the environment or clock",
    # The Python interpreter is reachable from C++: through it a kernel could patch anything
    # in the process (timers, torch, the harness). pybind11's argument helpers stay allowed.
    r"\b_?Py[A-Z]\w*|\bTHP\w+|\btorch::(python|jit)\b|"
    r"\b(py|pybind11)::(?!(arg|call_guard|gil_scoped_release|gil_scoped_acquire|"
    r"return_value_policy|module_|kw_only|pos_only)\b)\w+|::import\b|\.attr\s*\(": (
        "reaches into the Python interpreter (it could patch anything in the process)"
    ),
    r"##": "pastes tokens together (names no check can read)",
}
# Inline assembly: what no compiler-visible call shows. PTX in CUDA sources is fine; host
# instructions that enter the kernel, jump to other code or read the clock are not.
ASM_STATEMENT = re.compile(r"\b(asm|__asm__|__asm)\b\s*(volatile|__volatile__|goto)?\s*\(")
FORBIDDEN_ASM = re.compile(r"\b(syscall|sysenter|int|call|jmp|rdtscp?|rdpmc|rdmsr|wrmsr)\b")


def check_native(source: str, dtype: str) -> list[str]:
    """Reasons to reject C++/CUDA source given to load_inline; empty when it passes."""
    code = re.sub(r"\s*::\s*", "::", _strip_comments_and_strings(source))
    reasons = _asm_reasons(_strip_comments(source))
    for pattern, why in FORBIDDEN_NATIVE.items():
        match = re.search(pattern, code)
        if match:
            reasons.append(f"kernel source {why}: {match.group(0).strip()!r}")
    if dtype == "float32":
        match = re.search(LOW_PRECISION_NATIVE, code)
        if match:
            reasons.append(
                f"kernel source uses reduced precision ({match.group(0)!r}) in a float32 problem"
            )
    return reasons


def _asm_reasons(code: str) -> list[str]:
    """Inline assembly may not make system calls, call or jump elsewhere, or read clocks."""
    for statement in ASM_STATEMENT.finditer(code):
        body = code[statement.end() : code.find(";", statement.end())]
        found = FORBIDDEN_ASM.search(body)
        if found:
            return [f"kernel source has inline assembly with {found.group(0)!r}"]
    return []


def _strip_comments(source: str) -> str:
    source = re.sub(r"/\*.*?\*/", " ", source, flags=re.S)
    return re.sub(r"//[^\n]*", " ", source)


def _strip_comments_and_strings(source: str) -> str:
    return re.sub(r'"(\\.|[^"\\])*"', '""', _strip_comments(source))
