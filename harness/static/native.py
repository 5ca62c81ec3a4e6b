"""The static gate for kernel sources (C++ and CUDA handed to load_inline).

Read once as the preprocessor reads it (``harness.static.native_lex``: lines spliced, digraphs
replaced, comments dropped, literals as single tokens), in time linear in the source's length.
Then: directives and includes (``harness.static.native_directives``: system and toolkit headers only),
state across calls (``harness.static.native_state``: every object that outlives a call is immutable),
and the name rules below, on the tokens joined into one line: threads, files, sockets,
PyTorch's distributed and RPC code, processes, host callbacks, the Python interpreter,
operator registration, profiler switches, ATen kernels called around the dispatcher, token
pasting, inline assembly that leaves the kernel, and reduced precision in a float32 problem.
The built library's imported symbols and writable data are checked after the build
(``harness.static.symbols``), which no spelling of the source can hide from.
"""

from __future__ import annotations

import re

from harness.static.native_directives import directive_problems
from harness.static.native_lex import Lexed, UnreadableSource, lex
from harness.static.native_state import state_problems

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
    r"\bstd::thread\b|\bstd::jthread\b": "starts threads (work the timer cannot see)",
    r"\bpthread_\w+": "starts threads or keeps thread-local state (pthread_*)",
    r"\bstd::async\b": "starts asynchronous work the timer cannot see",
    r"\b(fork|vfork|system|popen|execv\w*|execl\w*|dlopen|dlsym)\s*\(": "runs or loads programs",
    r"\b(fopen|fopen64|freopen|fdopen|tmpfile|tmpnam|ifstream|ofstream|fstream|open|open64|"
    r"openat|creat|mkstemp\w*|opendir|mmap|shm_open|memfd_create|unlink|readlink|realpath|"
    r"chdir)\s*\(|\bFILE\b|\bstd::(filesystem|experimental|[io]?fstream|filebuf|basic_\w*fstream|"
    r"basic_filebuf)\b|\b(ifstream|ofstream|fstream|filebuf)\b|\btorch::(save|load|pickle_save|"
    r"pickle_load|serialize)\b|\bcaffe2::serialize\b|\b(from_file|MapAllocator|"
    r"RefcountedMapAllocator)\b": "touches files",
    r"\b(c10d|gloo|tensorpipe|TCPStore\w*|FileStore|HashStore|PrefixStore|ProcessGroup\w*|"
    r"nccl[A-Z]\w*)\b|\btorch::distributed\b|\bdistributed::|\brpc::|"
    r"(?<![.>:])\b(socket|socketpair|connect|bind|listen|accept4?|sendto|sendmsg|recvfrom|"
    r"recvmsg|getaddrinfo|gethostbyname\w*|inet_\w+|setsockopt)\s*\(": (
        "reaches the network or PyTorch's distributed and RPC code"
    ),
    r"\bcudaLaunchHostFunc\b|\bcudaStreamAddCallback\b": "runs host callbacks off the stream",
    r"\bcuda(MemcpyToSymbol|MemcpyFromSymbol|GetSymbolAddress|GetSymbolSize)\w*": (
        "writes or reads device globals from the host (state across calls)"
    ),
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
FORBIDDEN_ASM = re.compile(r"\b(syscall|sysenter|int|call|jmp|rdtscp?|rdpmc|rdmsr|wrmsr)\b")


def check_native(source: str, dtype: str) -> list[str]:
    """Reasons to reject C++/CUDA source given to load_inline; empty when it passes."""
    try:
        lexed = lex(source)
    except UnreadableSource as err:
        return [f"kernel source cannot be read: {err}"]
    code = joined(lexed)
    reasons = directive_problems(lexed) + state_problems(lexed) + _asm_reasons(lexed)
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


def joined(lexed: Lexed) -> str:
    """Every token, directives' included, on one line: literals as ``""``, and ``::``, ``.``
    and ``->`` joined to their neighbours, so that each spelling of a name reads the same."""
    texts = ['""' if t.kind in ("str", "chr") else t.text for t in lexed.all_tokens]
    line = " ".join(texts)
    for glued in ("::", ".", "->"):
        line = line.replace(f" {glued} ", glued)
    return line + "".join(f" #include <{include.header}>" for include in lexed.includes)


def _asm_reasons(lexed: Lexed) -> list[str]:
    """Inline assembly may not make system calls, call or jump elsewhere, or read clocks."""
    tokens = lexed.all_tokens
    index = 0
    while index < len(tokens):
        if tokens[index].text not in ("asm", "__asm__", "__asm"):
            index += 1
            continue
        end = index + 1
        while end < len(tokens) and tokens[end].text not in (";", "}"):
            end += 1
        body = " ".join(t.text for t in tokens[index:end] if t.kind == "str")
        found = FORBIDDEN_ASM.search(body)
        if found:
            return [f"kernel source has inline assembly with {found.group(0)!r}"]
        index = end
    return []
