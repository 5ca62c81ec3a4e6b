"""The native gate for the class of each attack: includes, the network and files, state across
calls, and linear time on any source."""

from __future__ import annotations

import shutil
import signal
import subprocess

import pytest

from harness.static.native import check_native
from harness.static.native_lex import MAX_SOURCE_CHARS
from harness.static.symbols import object_problems

KERNEL = """
#include <torch/extension.h>
torch::Tensor f(torch::Tensor x) { return x; }
"""


def refused(source: str, says: str) -> bool:
    return any(says in reason for reason in check_native(source, "float32"))


# --- includes: system and toolkit headers only ----------------------------------------------

SECRET_INCLUDES = [
    '#include "/etc/passwd"',
    "#include </etc/passwd>",
    '#include "../../../../../../etc/passwd"',
    '#include "torch/../../../../etc/passwd"',
    '#define SECRET "/etc/passwd"\n#include SECRET',
    "#define SECRET </etc/passwd>\n#include SECRET",
    '%:include "/etc/passwd"',  # a digraph for '#'
    '#inc\\\nlude "/etc/pa\\\nsswd"',  # line splices inside the directive and the name
    '/* a comment */ # /* another */ include /* */ "/etc/passwd"',
    '#include "kernelpilot_secret.h"',  # a name that is no system or toolkit header
    '#include ".hidden/x.h"',
    "#include_next <stdio.h>",
    '#embed "/etc/passwd"',
    '#import "/etc/passwd"',
    '#if __has_include("/etc/passwd")\n#endif',
    '#pragma GCC dependency "/etc/passwd"',
    '_Pragma("GCC dependency \\"/etc/passwd\\"") int x;',
    '#define P(x) _Pragma(#x)\nP(GCC dependency "/etc/passwd")',
    '??=include "/etc/passwd"',  # a trigraph: -std=c++11 replaces it, gnu++17 does not
    '#line 1 "/etc/passwd"',
]


@pytest.mark.parametrize("directive", SECRET_INCLUDES)
def test_includes_outside_the_toolkit_are_refused(directive):
    reasons = check_native(directive + "\n" + KERNEL, "float32")
    assert reasons, directive


def test_system_and_toolkit_headers_are_fine():
    source = (
        "#include <torch/extension.h>\n#include <ATen/ATen.h>\n#include <cmath>\n"
        '#include <vector>\n#include "c10/util/Half.h"\n#include <omp.h>\n#pragma once\n'
        "#pragma omp parallel for\n#pragma GCC unroll 4\n" + KERNEL
    )
    assert check_native(source, "float32") == []


def test_an_absolute_include_never_reaches_the_compiler(tmp_path):
    """The attack itself: the compiler prints an included secret into the build log."""
    compiler = shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    secret = tmp_path / "secret.txt"
    secret.write_text("kp_secret_token_value\n")
    source = tmp_path / "main.cpp"
    source.write_text(f'#include "{secret}"\nint main() {{ return 0; }}\n')
    run = subprocess.run([compiler, "-c", str(source), "-o", str(tmp_path / "m.o")],
                         capture_output=True, text=True)  # fmt: skip
    assert "kp_secret_token_value" in run.stderr  # what a build log would carry
    assert refused(source.read_text(), "absolute path")


# --- the network, other processes, files ----------------------------------------------------

NETWORK_AND_FILES = [
    ("#include <torch/csrc/distributed/c10d/TCPStore.hpp>", "network"),
    ('void f() { c10d::TCPStore store("127.0.0.1", c10d::TCPStoreOptions{}); }', "network"),
    ("using namespace c10d;\nvoid f() { TCPStore* s = nullptr; }", "network"),
    ("void f() { torch::distributed::rpc::RpcAgent* a = nullptr; }", "network"),
    ("#include <sys/socket.h>", "network"),
    ("int f() { return socket(2, 1, 0); }", "network"),
    ("int f(int s) { return connect(s, nullptr, 0); }", "network"),
    ("#include <fstream>", "files"),
    ("#include <filesystem>", "files"),
    ("void f() { std::filesystem::path p; }", "files"),
    ('void f() { FILE* fp = fopen("/etc/passwd", "r"); }', "files"),
    ('void f(at::Tensor t) { torch::save(t, "/tmp/x"); }', "files"),
    ("void f() { int fd = open(0, 0); }", "files"),
    ("void f() { pthread_key_t k; pthread_key_create(&k, nullptr); }", "pthread"),
    ("void f() { cudaMemcpyToSymbol(w, p, 4); }", "device globals"),
]


@pytest.mark.parametrize(("source", "says"), NETWORK_AND_FILES)
def test_the_network_files_and_other_processes_are_refused(source, says):
    assert refused(source, says), source


def test_method_names_like_socket_calls_are_fine():
    source = "float f(at::Tensor x) { return x.select(0, 1).sum().item<float>(); }"
    assert check_native(source, "float32") == []


def test_the_built_objects_show_what_the_source_hid(tmp_path):
    """A declaration of its own (no header, any spelling) still imports the library's symbol,
    and state the source rules missed is still writable data in the object."""
    compiler = shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "main.cpp"
    source.write_text(
        "#include <string>\n"
        "namespace c10d { struct TCPStore { TCPStore(std::string host, int port); }; }\n"
        "namespace { int calls = 0; }\n"
        'float f(float x) { c10d::TCPStore s("127.0.0.1", 29500); return ++calls > 3 ? 0 : x; }\n'
    )
    subprocess.run([compiler, "-O2", "-c", str(source), "-o", str(tmp_path / "main.o")], check=True)
    reasons = " ".join(object_problems([tmp_path / "main.o"]))
    assert "c10d::" in reasons
    assert "writable data of its own ((anonymous namespace)::calls)" in reasons


# --- state across calls ------------------------------------------------------------------------

STATE = [
    "int counter = 0;",
    "int counter;",
    "int counter(0);",
    "namespace { int counter = 0; }",
    "namespace kp { std::atomic<long> counter{0}; }",
    'extern "C" { int counter; }',
    "extern int opterr;",
    "struct S { int n; } counter;",
    "struct S { static int n; };\nint S::n = 0;",
    "struct S { static inline int n = 0; };",
    "__device__ unsigned long long launches = 0;",
    "__managed__ int launches;",
    "__constant__ float weights[256];",
    "const torch::Tensor cache = torch::empty({1});",
    "const float* last = nullptr;",
    "int* const slot = new int(0);",
    "struct S { mutable int n; };\nconstexpr S s{};",
    "float f(float x) { static float last = 0; last = x; return last; }",
    "float f(float x) { static float buffer[1024]; return buffer[0]; }",
    "float f(float x) { thread_local int calls = 0; return x * ++calls; }",
    "float f(float x) { extern int counter; return x * counter; }",
    "#define TYPE int\nTYPE counter = 0;",
    "#define DECLARE(n) int n = 0;\nDECLARE(counter)",
    "#define COUNTER static int n = 0;\nfloat f() { COUNTER return n++; }",
    "#define CLOSE }\nnamespace kp { void f() { CLOSE int counter; }",
    "namespace kp {\n#if 1\n}\nint counter;\nvoid g() {\n#endif\n}",
    "#if 1\nint counter\n#else\nvoid f()\n#endif\n;",
    "namespace c10 { inline int& calls() { static int n; return n; } }",
]


@pytest.mark.parametrize("source", STATE)
def test_state_across_calls_is_refused(source):
    assert check_native(source, "float32"), source


IMMUTABLE = [
    "constexpr int kThreads = 256;",
    "constexpr float kScale[4] = {1.f, 2.f, 3.f, 4.f};",
    "const float kInvSqrt2 = 0.70710678f;\nstatic const int kRows = 8;",
    'const char* const kName = "gelu";',
    "namespace { constexpr int64_t kLanes = 8; }",
    "__constant__ float kTable[4] = {0.f, 1.f, 2.f, 3.f};",
    "struct S { static constexpr int k = 3; int member; void f() { member++; } };",
    "__global__ void k(float* p) { __shared__ float tile[256]; extern __shared__ float dyn[]; }",
    "float f(float x) { static constexpr float k = 2.f; auto g = [n = 0]() mutable { return ++n; };"
    " return x * k; }",
    "#define BLOCK 256\n#define HD __host__ __device__\nconstexpr int kBlock = BLOCK;\n"
    "HD inline float sq(float v) { return v * v; }",
    "torch::Tensor f(torch::Tensor x);\nvoid g(int, float*);\ntemplate <typename T> T h(T v);",
]


@pytest.mark.parametrize("source", IMMUTABLE)
def test_immutable_objects_and_ordinary_code_are_fine(source):
    assert check_native(source, "float32") == [], source


# --- linear time --------------------------------------------------------------------------------

# Sources that kept the regular-expression gate busy for minutes (each pattern went back over
# the rest of the source from every starting point: quadratic), at a size just under the cap.
# The gate reads them in seconds; the alarm is a hang guard, not a timing assertion: at this
# size the quadratic gate needs tens of minutes, far past it.
SIZE = MAX_SOURCE_CHARS - 16
ADVERSARIAL = {
    "whitespace": "x" + " " * SIZE,
    "static tokens": "static " * (SIZE // 7),
    "static tensors": "static at::Tensor " * (SIZE // 18),
    "escaped quotes": '"' + '\\"' * (SIZE // 2),
    "open comments": "/* " * (SIZE // 3),
    "asm without end": "asm(" * (SIZE // 4),
}


@pytest.fixture
def hang_guard():
    def expired(*_):
        raise TimeoutError("the native gate hung on an adversarial source (super-linear)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(240)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_the_gate_answers_on_adversarial_sources(name, hang_guard):
    source = ADVERSARIAL[name]
    assert len(source) > MAX_SOURCE_CHARS // 2
    assert isinstance(check_native(source, "float32"), list)


def test_a_source_past_the_cap_is_refused_unread():
    reasons = check_native(" " * (10 * 1024 * 1024), "float32")
    assert len(reasons) == 1 and "the gate reads at most" in reasons[0]


def test_unreadable_spellings_are_refused():
    for source in ('const char* s = "open;', "/* open comment", 'R"x(raw', "int \\u0061;",
                   "int caf\u00e9 = 1;", "// comment \\ \nint counter;"):  # fmt: skip
        assert refused(source, "cannot be read"), source


def test_token_pasting_digraphs_are_refused():
    assert refused("#define P(n) Py %:%: n\nvoid f() { P(Run_SimpleString)(0); }", "pastes")


def test_define_flags_that_redefine_keywords_are_named():
    from harness.static.native_directives import define_flag_problems

    assert define_flag_problems(["-Dconstexpr=inline", "-Uconst", "-DBLOCK=256"]) == [
        "build flag '-Dconstexpr=inline' redefines the keyword constexpr",
        "build flag '-Uconst' redefines the keyword const",
    ]
