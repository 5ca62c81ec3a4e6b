"""What a built kernel library may call outside itself, read from the symbols it imports.

Read from the compiled objects (``nm --undefined-only`` of each ``.o``: the candidate's code and
what PyTorch's headers inline into it), so no spelling of the source (macros, aliases,
declarations of its own, token pasting) hides a call. Not from the linked library: a toolchain
that links the C++ runtime statically (the GPU machine's does) brings the runtime's own imports
(locale, iconv, open, syscall) and defines std::thread inside the library. The objects'
machine code is also scanned for instructions that reach the kernel or read clocks directly.
Two rules for symbols:

- C++ symbols (PyTorch, the C++ runtime) are allowed unless they reach ATen kernels around the
  dispatcher (and so around the profiler), switch profiling hooks off, start threads, touch
  files, or change PyTorch's global settings.
- Plain C symbols (libc, libm, OpenMP, the CUDA runtime, cuBLAS) must be on an allow-list:
  memory, strings, maths, printing, the C++ runtime's support functions, OpenMP's parallel
  loops, kernel launches and copies. Everything else (scheduling and affinity, priorities,
  signals, timers, clocks, system calls, files, sockets, processes, device-wide CUDA settings)
  is how a kernel would slow the baselines down or act outside its call.

The Python C API (``Py*``) is left to the source check (``harness.static.python``): pybind11's own glue
imports much of it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from harness.workers.profiling import FAMILY_OF, LAYOUT_OPS

FORBIDDEN_CXX = re.compile(
    r"at::cpu::|at::native::|redispatch|at::RecordFunction|enableRecordFunction|"
    r"std::thread::|std::jthread|std::filesystem::|std::basic_[io]?fstream|std::basic_filebuf|"
    r"at::launch\b|at::intraop_launch|at::Context::set\w+|at::set_num\w*threads|"
    r"c10::ThreadPool|at::PTThreadPool|c10::TaskThreadPool|"
    r"at::get_thread_pool|profiler::|ThreadLocalState|ThreadLocalDebugInfo|"
    r"c10::impl::(tls_|_force_tls)|at::(disable|reenable|remove|clear)\w*Callbacks?\b|"
    r"at::add(Global|ThreadLocal)Callback|torch::Library::|c10::RegisterOperators|"
    r"c10::Dispatcher::register|at::composite\w*::|at::meta::|"
    r"Set\w*Allocator|FLAGS_\w+|c10::cuda::CUDACachingAllocator::(?!(raw_alloc|raw_delete|get|allocator)\b)\w+|"
    r"at::cuda::(?!(getCurrentCUDAStream|getStreamFromPool|getDefaultCUDAStream|CUDAStream|"
    r"getCurrentDeviceProperties|getDeviceProperties|getCurrentCUDABlasHandle|"
    r"getCurrentCUDABlasLtHandle|warp_size|blas::|detail::|CUDAEvent|stream_synchronize|"
    r"getCurrentCUDASparseHandle|getNumGPUs|getDeviceIndexWithPrimaryContext))|"
    # Other processes, the network and files through PyTorch: distributed stores and process
    # groups, RPC, serialization, memory-mapped files.
    r"c10d::|torch::distributed::|gloo::|tensorpipe::|torch::jit::|caffe2::serialize::|"
    r"torch::serialize::|torch::(save|load|pickle_save|pickle_load)\b|"
    r"(at|c10)::(Refcounted)?MapAllocator|std::experimental::filesystem|std::__basic_file|"
    r"__gnu_cxx::stdio_(sync_)?filebuf"
)

_MATH = (
    r"(a?sin|a?cos|a?tan|atan2|a?sinh|a?cosh|a?tanh|exp|exp2|exp10|expm1|log|log2|log10|log1p|"
    r"pow|sqrt|rsqrt|cbrt|hypot|erfc?|erfinv|lgamma|tgamma|ceil|floor|l?l?round|l?l?rint|"
    r"nearbyint|trunc|fmod|remainder|remquo|fmin|fmax|fdim|fma|copysign|nextafter|ldexp|frexp|"
    r"modf|scalbl?n|ilogb|logb|sincos|fabs|nan|isnan|isinf|finite|signbit)[fl]?"
)
ALLOWED_C = re.compile(
    "|".join(
        [
            _MATH,
            r"__\w+_finite",  # glibc's -ffast-math entry points of the same functions
            r"Sleef_\w+",  # ATen's vectorized maths (at::vec), as its headers inline them
            r"_ZGV\w+",  # libmvec: the vectorized math functions
            r"__(isnan|isinf|finite|fpclassify|signbit)[fl]?",
            r"mem(cpy|move|set|cmp|chr|rchr)|__mem\w*_chk|wmem\w+",
            r"str(len|nlen|cmp|ncmp|chr|rchr|dup|ndup|cpy|ncpy|cat|ncat|str|spn|cspn|error)",
            r"str(to[ld]|to[u]?ll?|tof|told)|ato[ifl]{1,2}|__\w+_chk",
            r"(posix_)?memalign|aligned_alloc|malloc|calloc|realloc|free|malloc_usable_size",
            r"(v?f|v?sn?)?printf|puts|fputs|fputc|putc|putchar|fwrite|fflush|stderr|stdout",
            r"abort|atexit|__assert_fail|__stack_chk_fail|__cxa_\w+|__gxx_personality_v0|__dynamic_cast",
            r"_Unwind_\w+|__tls_get_addr|__libc_single_threaded|_ITM_\w+|__gmon_start__",
            r"__dso_handle|_GLOBAL_OFFSET_TABLE_|__errno_location|qsort|bsearch|abs|labs|llabs",
            r"__cpu_model|__cpu_features2|__cpu_indicator_init",  # target_clones dispatch
            r"pthread_(mutex|once|key|getspecific|setspecific|self|equal|cond|rwlock|spin)\w*",
            r"GOMP_(parallel\w*|loop\w*|barrier\w*|critical\w*|atomic\w*|single\w*|"
            r"sections\w*|ordered\w*|task\w*|workshare\w*|doacross\w*|cancel\w*|"
            r"reduction\w*|scope\w*|masked\w*|free|alloc)",
            r"omp_(get|in|is|test)_\w+|omp_(init|destroy|set|unset|test)_(nest_)?lock",
            # The CUDA runtime: launches, copies, streams and events of the candidate's own work.
            r"__cuda\w+|cudaLaunch(Kernel|KernelExC|CooperativeKernel)(_ptsz|_v\d+)?",
            r"cudaGetLastError|cudaPeekAtLastError|cudaGetError(String|Name)",
            r"cudaFunc(SetAttribute|GetAttributes|SetCacheConfig)",
            r"cudaMem(cpy|set)\w*|cuda(Malloc|Free)(Async)?|cudaGetSymbol\w+",
            # (_ptsz: the same calls in a library built for per-thread default streams)
            r"cudaStream(Synchronize|WaitEvent|Create\w*|Destroy|Query|GetPriority|"
            r"BeginCapture\w*|EndCapture|IsCapturing|GetCaptureInfo\w*)(_ptsz)?",
            r"cudaEvent(Create\w*|Record\w*|Destroy|Synchronize|Query|ElapsedTime)",
            r"cudaGraph\w+|cuda(Get|Set)Device|cudaGetDeviceCount|cudaGetDeviceProperties\w*",
            r"cudaDeviceGetAttribute|cudaDeviceSynchronize|cudaDeviceGetStreamPriorityRange",
            r"cudaOccupancy\w+|cuda(Driver|Runtime)GetVersion|cudaPointerGetAttributes",
            r"cublas(?!SetMathMode|SetAtomicsMode)\w+|cublasLt\w+",
        ]
    )
)


# CUDA calls that queue work on a stream. The checks' worker holds such work back on every stream
# but the caller's until it has read the outputs (harness/workers/native/stream_gate*.c interposes exactly the
# calls in STREAM_GATED); one it could not hold would let work the caller's stream does not wait
# for race the harness's read again, so a kernel library may not call the others (3D, peer and
# array copies, cuBLAS's asynchronous vector and matrix copies, ...).
STREAM_WORK = re.compile(
    r"cudaMem(cpy|set)\w*|cudaGraphLaunch\w*|cudaLaunch\w+|__cudaLaunch\w*|"
    r"cublas(Set|Get)(Vector|Matrix)Async\w*|cublasLtMatrixTransform\w*|cublasSetKernelStream"
)
STREAM_GATED = frozenset(
    [
        f"{name}{suffix}"
        for name in (
            "cudaLaunchKernel",
            "__cudaLaunchKernel",
            "cudaLaunchKernelExC",
            "cudaLaunchCooperativeKernel",
            "cudaMemcpyAsync",
            "cudaMemcpy2DAsync",
            "cudaMemsetAsync",
            "cudaMemset2DAsync",
            "cudaMemcpyToSymbolAsync",
            "cudaMemcpyFromSymbolAsync",
            "cudaGraphLaunch",
        )
        for suffix in ("", "_ptsz")
    ]
    + [
        f"{name}{suffix}"
        for name in (
            "cudaMemcpy",
            "cudaMemcpy2D",
            "cudaMemcpyToSymbol",
            "cudaMemcpyFromSymbol",
            "cudaMemset",
            "cudaMemset2D",
        )
        for suffix in ("", "_ptds")
    ]
)


# Instructions no kernel needs: system calls around libc, and clock/counter reads (timers).
FORBIDDEN_INSTRUCTION = re.compile(r"\s(syscall|sysenter|rdtscp?|rdpmc)\b|\sint\s+\$0x80\b")


def _binutils(tool: str, options: list[str], objects: list[Path]) -> str:
    """The output of a binutils ``tool`` (nm, objdump) run over ``objects``."""
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} (binutils) is needed to check built kernels: install binutils")
    command = [path, *options, *map(str, objects)]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def undefined_symbols(objects: list[Path]) -> list[str]:
    """Demangled names of the symbols the compiled ``objects`` take from elsewhere."""
    listing = _binutils("nm", ["-C", "--undefined-only"], objects)
    # Lines are "                 U name"; demangled C++ names contain spaces.
    return [line.split("U ", 1)[1].strip() for line in listing.splitlines() if " U " in line]


def instruction_problems(objects: list[Path]) -> list[str]:
    """Reasons to reject objects whose machine code makes system calls or reads clocks."""
    listing = _binutils("objdump", ["-d", "--no-show-raw-insn"], objects)
    found = sorted({m.group(0).strip() for m in FORBIDDEN_INSTRUCTION.finditer(listing)})
    if not found:
        return []
    return [
        f"the built kernel's machine code has {', '.join(found)}: system calls and clock reads "
        "(around libc and the allowed functions) are not a kernel's work"
    ]


def object_problems(objects: list[Path]) -> list[str]:
    """Reasons to reject a build from its compiled objects; empty when it may be loaded."""
    if not objects:
        return ["the build left no compiled objects to check"]
    # nvcc's host objects hold shadows of device variables and its own registration data; the
    # source rule (harness.static.native_state) covers what a .cu file keeps.
    host_cxx = [path for path in objects if not path.name.endswith(".cuda.o")]
    return (
        symbol_problems(undefined_symbols(objects))
        + instruction_problems(objects)
        + writable_data_problems(host_cxx)
    )


# Writable data the libraries' headers define in every extension: pybind11's and the C++
# runtime's function-local statics, the module definition pybind11 makes. A candidate may not
# add to these namespaces (harness.static.native_state refuses it), nor name a function PyInit_*.
LIBRARY_DATA = re.compile(
    r"(guard variable for )?(pybind11::|std::|__gnu_cxx::|c10::|at::|torch::|caffe2::|"
    r"PyInit_\w+::|DW\.ref\.)"
)
# objdump -t: "address flags section<TAB>size name"; writable sections hold what can change.
OBJECT_LINE = re.compile(
    r"^[0-9a-f]+ (?P<flags>.{7}) (?P<section>\S+)\t[0-9a-f]+ (\.hidden )?(?P<name>.+)$"
)
WRITABLE_SECTION = re.compile(r"\.(data|bss|tdata|tbss)(?!\.rel\.ro)|\*COM\*")


def writable_data(objects: list[Path]) -> list[str]:
    """Demangled names of the data objects ``objects`` define in writable sections."""
    if not objects:
        return []
    listing = _binutils("objdump", ["-t", "-C"], objects)
    names = []
    for line in listing.splitlines():
        match = OBJECT_LINE.match(line)
        if match and match["flags"][-1] == "O" and WRITABLE_SECTION.match(match["section"]):
            names.append(match["name"])
    return names


def writable_data_problems(objects: list[Path]) -> list[str]:
    """State across calls as the compiler laid it out: writable data of the candidate's own."""
    own = sorted({name for name in writable_data(objects) if not LIBRARY_DATA.match(name)})
    if not own:
        return []
    return [
        f"the built kernel keeps writable data of its own ({', '.join(own[:8])}): objects "
        "that outlive a call must be constexpr or const (state across calls)"
    ]


# ATen operators called from C++ go through ``at::_ops::<op>[_<overload>]::call``.
ATEN_OP = re.compile(r"at::_ops::(\w+)::call\b")
# OpenMP entry points that start threads: ATen ops run on those threads escape the profiler,
# whose hooks are thread-local.
OPENMP_THREADS = re.compile(r"GOMP_(parallel|task|teams)\w*|__kmpc_fork\w*")


def _op_named(struct: str, names: set[str] | dict[str, str]) -> bool:
    """``empty_memory_format`` is the op ``empty``; ``add__Tensor`` is ``add_``."""
    return any(struct == name or struct.startswith(name + "_") for name in names)


def aten_op_problems(symbols: list[str]) -> list[str]:
    """ATen operators a kernel library calls from C++ that the profiler could miss or rejects.

    Allocation and layout ops are free. Other computing ops are refused outright (the profiler
    would refuse them too, when it sees them). Library ops (matmul, conv, ...) are allowed from
    C++ unless the library also starts OpenMP threads: an op run on such a thread is invisible
    to the profiler's per-thread hooks, so its count could not be checked.
    """
    ops = {m.group(1) for symbol in symbols if (m := ATEN_OP.search(symbol))}
    compute = {op for op in ops if not _op_named(op, LAYOUT_OPS)}
    computing = sorted(op for op in compute if not _op_named(op, FAMILY_OF))
    reasons = []
    if computing:
        reasons.append(
            f"the built kernel calls PyTorch operators ({', '.join(computing)}) from C++: a "
            "candidate's own kernels do its work; library ops (matmul, conv, norms, softmax) "
            "and allocation may stay PyTorch calls"
        )
    threads = sorted({m.group(0) for symbol in symbols if (m := OPENMP_THREADS.match(symbol))})
    library = sorted(compute - set(computing))
    if library and threads:
        reasons.append(
            f"the built kernel starts OpenMP threads ({', '.join(threads)}) and calls PyTorch "
            f"operators ({', '.join(library)}) from C++: ops run on those threads escape the "
            "profiler. Call library ops from Python, around the kernel"
        )
    return reasons


def symbol_problems(symbols: list[str]) -> list[str]:
    """Reasons to reject a kernel library that imports ``symbols``; empty when it may run."""
    forbidden_cxx, outside_list, unheld = set(), set(), set()
    for symbol in symbols:
        match = FORBIDDEN_CXX.search(symbol)
        if match:
            forbidden_cxx.add(match.group(0))
        elif _is_c(symbol) and not ALLOWED_C.fullmatch(symbol.split("@")[0]):
            outside_list.add(symbol.split("@")[0])
        elif STREAM_WORK.fullmatch(name := symbol.split("@")[0]) and name not in STREAM_GATED:
            unheld.add(name)
    reasons = []
    if forbidden_cxx:
        reasons.append(
            f"the built kernel imports {', '.join(sorted(forbidden_cxx))}: ATen kernels around "
            "the dispatcher, hooks switched off, threads, files, other processes and the network "
            "(distributed stores, RPC) or PyTorch's global settings"
        )
    if outside_list:
        reasons.append(
            f"the built kernel calls {', '.join(sorted(outside_list))} from the system libraries: "
            "a kernel may use memory, maths, OpenMP loops and CUDA launches and copies, not "
            "scheduling, priorities, signals, clocks, files, processes or device-wide settings"
        )
    if unheld:
        reasons.append(
            f"the built kernel queues work through {', '.join(sorted(unheld))}, which the "
            "harness's stream-order check cannot hold back: use kernel launches, cudaMemcpyAsync, "
            "cudaMemcpy2DAsync or cudaMemsetAsync on the current stream"
        )
    return reasons + aten_op_problems(symbols)


def _is_c(symbol: str) -> bool:
    """A plain C symbol (not C++, not the Python C API that pybind11's glue needs)."""
    name = symbol.split("@")[0]
    if re.match(r"_?Py|_Py", name):
        return False
    return not re.search(r"::|\(|\s", name) and not name.startswith("_Z")
