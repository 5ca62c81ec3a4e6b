"""The built library's imported symbols: the allow-list on tables of real symbol names."""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import pytest

from harness.builds.cache import CPU_CFLAGS, CPU_LDFLAGS, CachedLoader
from harness.builds.store import BuildSpec
from harness.static.python import GateRejection
from harness.static.symbols import symbol_problems

# What an honest C++ (OpenMP) extension built by load_inline imports (read with nm -D -C).
HONEST_CPU = [
    "GOMP_parallel@GOMP_4.0",
    "omp_get_num_threads@OMP_1.0",
    "omp_get_thread_num@OMP_1.0",
    "PyObject_SetAttrString",  # pybind11's own glue: left to the source check
    "PyEval_GetBuiltins",
    "_Py_Dealloc",
    "__cxa_guard_acquire@CXXABI_1.3",
    "__dynamic_cast@CXXABI_1.3",
    "memcpy@GLIBC_2.14",
    "expf@GLIBC_2.27",
    "erff@GLIBC_2.2.5",
    "__expf_finite@GLIBC_2.15",
    "_ZGVdN8v_expf@GLIBC_2.22",
    "pthread_mutex_lock@GLIBC_2.2.5",
    "fprintf@GLIBC_2.2.5",
    "stderr@GLIBC_2.2.5",
    "at::empty_like(at::Tensor const&, c10::TensorOptions, std::optional<c10::MemoryFormat>)",
    "c10::detail::torchCheckFail(char const*, char const*, unsigned int, char const*)",
    "c10::impl::ExcludeDispatchKeyGuard::~ExcludeDispatchKeyGuard()",
    "typeinfo for std::runtime_error@GLIBCXX_3.4",
    "at::init_num_threads()",  # at::parallel_for's own set-up, inlined from ATen's headers
    "Sleef_expf8_u10",  # at::vec::Vectorized<float>::exp
    "at::_ops::empty_memory_format::call(c10::ArrayRef<c10::SymInt>, std::optional<c10::ScalarType>, "
    "std::optional<c10::Layout>, std::optional<c10::Device>, std::optional<bool>, "
    "std::optional<c10::MemoryFormat>)",
    "at::_ops::contiguous::call(at::Tensor const&, c10::MemoryFormat)",
]
# ... and a CUDA one: kernel registration and launch, streams, cuBLAS.
HONEST_CUDA = [
    "__cudaRegisterFatBinary",
    "__cudaRegisterFatBinaryEnd",
    "__cudaRegisterFunction",
    "__cudaPushCallConfiguration",
    "__cudaPopCallConfiguration",
    "__cudaUnregisterFatBinary",
    "cudaLaunchKernel",
    "cudaGetLastError",
    "cudaFuncSetAttribute",
    "cudaMemsetAsync",
    "cudaStreamWaitEvent",
    "cudaEventRecord",
    "atexit",
    "cublasSgemm_v2",
    "cublasSetStream_v2",
    "at::cuda::getCurrentCUDAStream(signed char)",
    "at::cuda::getCurrentCUDABlasHandle()",
    "c10::cuda::c10_cuda_check_implementation(int, char const*, char const*, unsigned int, bool)",
    "c10::cuda::CUDACachingAllocator::allocator",  # read by the inline CUDACachingAllocator::get()
    "at::_ops::matmul::call(at::Tensor const&, at::Tensor const&)",  # cuBLAS GEMM, then a kernel
]


def test_honest_libraries_pass():
    assert symbol_problems(HONEST_CPU) == []
    assert symbol_problems(HONEST_CUDA) == []


@pytest.mark.parametrize(
    ("symbol", "says"),
    [
        ("sched_setaffinity@GLIBC_2.3.4", "sched_setaffinity"),
        ("setpriority@GLIBC_2.2.5", "setpriority"),
        ("syscall@GLIBC_2.2.5", "syscall"),
        ("sigaction@GLIBC_2.2.5", "sigaction"),
        ("setitimer@GLIBC_2.2.5", "setitimer"),
        ("clock_gettime@GLIBC_2.17", "clock_gettime"),
        ("nanosleep@GLIBC_2.2.5", "nanosleep"),
        ("fork@GLIBC_2.2.5", "fork"),
        ("openat@GLIBC_2.4", "openat"),
        ("socket@GLIBC_2.2.5", "socket"),
        ("dlsym@GLIBC_2.34", "dlsym"),
        ("fesetround@GLIBC_2.2.5", "fesetround"),
        ("mprotect@GLIBC_2.2.5", "mprotect"),
        ("omp_set_num_threads@OMP_1.0", "omp_set_num_threads"),
        ("pthread_create@GLIBC_2.34", "pthread_create"),
        ("cudaDeviceSetLimit", "cudaDeviceSetLimit"),
        ("cudaLaunchHostFunc", "cudaLaunchHostFunc"),
        ("cudaStreamSetAttribute", "cudaStreamSetAttribute"),
        ("cudaDeviceReset", "cudaDeviceReset"),
        ("cublasSetMathMode", "cublasSetMathMode"),
        ("at::set_num_threads(int)", "at::set_num_threads"),
        ("at::Context::setAllowTF32CuBLAS(bool)", "at::Context::setAllowTF32CuBLAS"),
        (
            "at::native::add(at::Tensor const&, at::Tensor const&, c10::Scalar const&)",
            "at::native::",
        ),
        ("at::cpu::gelu(at::Tensor const&, std::basic_string_view<char>)", "at::cpu::"),
        ("at::launch(std::function<void ()>)", "at::launch"),
        ("c10::ThreadPool::ThreadPool(int, int, std::function<void ()>)", "c10::ThreadPool"),
        ("torch::profiler::impl::ProfilerStateBase::get(bool)", "profiler::"),
        ("std::thread::_State::~_State()@GLIBCXX_3.4.22", "std::thread::"),
        (
            "std::basic_ifstream<char, std::char_traits<char> >::basic_ifstream()",
            "std::basic_ifstream",
        ),
        ("c10::SetCPUAllocator(c10::Allocator*, unsigned char)", "SetCPUAllocator"),
        ("c10::SetAllocator(c10::DeviceType, c10::Allocator*, unsigned char)", "SetAllocator"),
        (
            "at::compositeexplicitautograd::clone(at::Tensor const&)",
            "at::compositeexplicitautograd",
        ),
        ("at::_ops::gelu::call(at::Tensor const&, c10::basic_string_view<char>)", "gelu"),
        (
            "at::_ops::add__Tensor::call(at::Tensor&, at::Tensor const&, c10::Scalar const&)",
            "add__Tensor",
        ),
        # A library op is fine from C++, but not from a library that starts OpenMP threads:
        # the profiler's hooks are per thread and would miss it (HONEST_CPU has GOMP_parallel).
        ("at::_ops::_softmax::call(at::Tensor const&, long, bool)", "OpenMP threads"),
    ],
)
def test_rejected_symbols_are_named(symbol, says):
    reasons = symbol_problems([*HONEST_CPU, symbol])
    assert len(reasons) == 1 and says in reasons[0], reasons


def test_cuda_library_ops_pass_without_openmp_threads():
    assert (
        symbol_problems([*HONEST_CUDA, "at::_ops::_softmax::call(at::Tensor const&, long, bool)"])
        == []
    )


def _libc_getenv(name: bytes) -> bytes | None:
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    return getenv(name)


def test_a_library_is_checked_before_it_is_loaded(tmp_path):
    """Loading runs a library's static initializers: a rejected one must never be loaded."""
    marker = b"KP_STATIC_INITIALIZER_RAN"
    cpp = (
        "#include <torch/extension.h>\n#include <cstdlib>\n"
        f'static int ran = setenv("{marker.decode()}", "1", 1);\n'
        "torch::Tensor same(torch::Tensor x) { return x; }\n"
    )
    loader = CachedLoader(tmp_path, "cpu", "float32")
    spec = BuildSpec(cpp=cpp, functions=["same"], cflags=list(CPU_CFLAGS),
                     ldflags=list(CPU_LDFLAGS), device="cpu")  # fmt: skip
    # _build is below the source check (which would catch setenv by name): the binary's
    # imported symbols alone must stop it.
    with pytest.raises(GateRejection, match="setenv"):
        loader._build(spec)
    assert _libc_getenv(marker) is None


def test_builds_use_the_ninja_of_the_interpreter_environment(tmp_path, monkeypatch):
    """Workers put the interpreter's bin folder first on PATH; a loader in any other process
    must too. Two ninja versions (a system one and the venv's) record a build command under
    different hashes, so a shared cache directory was rebuilt at every switch."""
    tools = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", os.pathsep.join(["/usr/bin", "/bin"]))
    CachedLoader(tmp_path, "cpu", "float32")
    assert os.environ["PATH"].split(os.pathsep) == [tools, "/usr/bin", "/bin"]
    CachedLoader(tmp_path, "cpu", "float32")  # a second loader does not add it again
    assert os.environ["PATH"].split(os.pathsep) == [tools, "/usr/bin", "/bin"]
