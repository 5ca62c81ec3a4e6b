"""The static gate: what it rejects, with the rule named, and what it lets through."""

from __future__ import annotations

import pytest

from harness.static.native import check_native
from harness.static.python import check_python

HEAD = "import torch\nimport torch.nn as nn\nfrom torch.utils.cpp_extension import load_inline\n"
CLASS = "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"


def forward(body: str) -> str:
    lines = "\n".join("        " + line for line in body.splitlines())
    return HEAD + CLASS + "    def forward(self, x):\n" + lines + "\n"


def method(header: str, body: str = "return x") -> str:
    """ModelNew with one more method: ``header`` is its decorators and def line, unindented
    (and a plain forward where that method is not one)."""
    lines = "\n".join("    " + line for line in header.splitlines())
    plain = "" if "def forward" in header else "    def forward(self, x):\n        return x\n"
    return HEAD + CLASS + plain + lines + "\n        " + body + "\n"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (HEAD + "x = 1\n", "no top-level class ModelNew"),
        (HEAD + CLASS, "ModelNew defines no forward"),
        (
            HEAD + "class Base(nn.Module):\n    pass\n" + CLASS.replace("nn.Module", "Base"),
            "ModelNew defines no forward",
        ),
        (forward("try:\n    return _ext.f(x)\nexcept Exception:\n    return x"), "try/except"),
        (HEAD + "class ModelNew(Model):\n    pass\n", "reference class Model"),
        (forward("return Model()(x)"), "reference class Model"),
        ("import os\n" + forward("return x"), "imports os"),
        ("import threading\n" + forward("return x"), "imports threading"),
        ("from torch.utils.cpp_extension import load\n" + forward("return x"), "load"),
        (forward("torch.nn.functional.gelu = lambda t: t\nreturn x"), "monkeypatching"),
        (forward("torch.backends.cuda.matmul.allow_tf32 = True\nreturn x"), "allow_tf32"),
        (forward("return x.half().float()"), "reduced precision"),
        (forward("return x.to(torch.bfloat16)"), "reduced precision"),
        (forward("self.calls = 1\nreturn x"), "state across calls"),
        (
            HEAD
            + "CACHE = {}\n"
            + CLASS
            + "    def forward(self, x):\n        CACHE[1] = x\n        return x\n",
            "shared state",
        ),
        (
            HEAD
            + "CACHE = []\n"
            + CLASS
            + "    def forward(self, x):\n        CACHE.append(x)\n        return x\n",
            "state across calls",
        ),
        (forward("return x.data_ptr()"), "raw pointer"),
        (forward("return getattr(x, 'y')"), "getattr"),
        (forward("return x.__class__"), "__class__"),
        (HEAD + "class Lazy(torch.Tensor):\n    pass\n" + CLASS, "derives from torch.Tensor"),
        # torch.nn's layers may be bases (real code's LayerNorm(nn.LayerNorm)); nothing else.
        (HEAD + "class G(torch.autograd.Function):\n    pass\n" + CLASS, "from torch.autograd"),
        (HEAD + "class P(nn.DataParallel):\n    pass\n" + CLASS, "derives from nn.DataParallel"),
        (HEAD + "class Q(nn.Parameter):\n    pass\n" + CLASS, "derives from nn.Parameter"),
        (HEAD + "nn = torch\nclass L(nn.Linear):\n    pass\n" + CLASS, "derives from nn.Linear"),
        (HEAD + "class L(nn.LazyLinear):\n    pass\n" + CLASS, "derives from nn.LazyLinear"),
        (
            HEAD + "Module = torch.Tensor\nclass E(Module):\n    pass\n" + CLASS,
            "derives from Module",
        ),
        # Hooks that run at load_state_dict, outside any call the harness times or checks (a
        # forward hook runs inside the call: the reference's own may be copied).
        (forward("self._register_load_state_dict_pre_hook(print)\nreturn x"), "runs at load"),
        (forward("self.register_load_state_dict_post_hook(print)\nreturn x"), "runs at load"),
        (forward("self._register_state_dict_hook(print)\nreturn x"), "runs at load"),
        (forward("return torch.compile(self)(x)"), "torch.compile"),
        (forward("return torch._C._nn.gelu(x)"), "private internals"),
        ("import torch as T\n" + forward("return T._C._nn.gelu(x)"), "private internals"),
        (forward("t = torch\nreturn t._C._nn.gelu(x)"), "private internals"),
        (forward("torch.set_num_threads(1)\nreturn x"), "global setting"),
        (forward("torch.set_flush_denormal(True)\nreturn x"), "global setting"),
        (forward("torch.compiler.reset()\nreturn x"), "torch.compile's state"),
        (forward("torch.cuda.empty_cache()\nreturn x"), "allocator's cache"),
        (forward("torch.manual_seed(0)\nreturn x"), "random generator"),
        (forward("torch.use_deterministic_algorithms(True)\nreturn x"), "algorithm selection"),
        (forward("return torch.backends.mkldnn.is_available()"), "backend flags"),
        (forward("global G\nreturn x"), "global"),
        (forward("return open('weights.bin')"), "uses open()"),
        # Module escapes: a chain from an import that reaches a module off the allowed list...
        (
            forward("return torch.package.sys_importer.import_module('harness.workers.timers')"),
            "torch.package reaches the module torch.package",
        ),
        (forward("return torch.testing.assert_close(x, x)"), "module torch.testing"),
        (forward("return nn.utils.parametrize"), "reaches the module torch.nn.utils"),
        (forward("return torch.onnx"), "reaches the module torch.onnx"),  # loaded lazily
        ("import torch.nn.functional as F\n" + forward("return F.torch.hub"), "torch.hub"),
        # ...on objects the gate cannot resolve, attributes named like torch's submodules...
        (forward("t = torch\nreturn t.package"), "named like the module torch.package"),
        (forward("return self.lib.testing.assert_close(x, x)"), "torch.testing"),
        (method("def forward(self, x, torch):", "return torch.package"), "torch.package"),
        # ...and the import machinery, builtins reached as attributes, frames and code objects.
        (forward("return x.sys_importer.import_module('os')"), ".import_module: imports"),
        (forward("return x.find_spec('os')"), ".find_spec: imports"),
        (forward("return x.loader.exec_module(x)"), ".exec_module: imports"),
        (forward("x.setattr(1)\nreturn x"), ".setattr: a builtin that the gate refuses"),
        (forward("return x.vars()"), ".vars: a builtin"),
        (forward("return x.gi_frame.f_back.f_globals"), ".f_globals: reads interpreter frames"),
        (forward("return x.gi_frame"), ".gi_frame: reads interpreter frames"),
        (forward("return x.co_consts"), ".co_consts: reads interpreter frames"),
        (forward("return x.tb_frame"), ".tb_frame: reads interpreter frames"),
        # Dunder names smuggled in as keywords or strings.
        (forward("return dict(__torch_function__=x)"), "passes __torch_function__="),
        (forward("return type('T', (object,), {}, __del__=x)"), "passes __del__="),
        (forward("return type('T', (torch.Tensor,), {'__del__': x})"), "the string '__del__'"),
        (forward("return {'__torch_function__': x}"), "the string '__torch_function__'"),
        (forward("return '__main__'"), "the string '__main__'"),
        # Mutable defaults: made once, kept across calls.
        (method("def forward(self, x, cache={}):"), "default cache={} is made once"),
        (method("def forward(self, x, cache=[]):"), "default cache=[] is made once"),
        (method("def forward(self, x, cache=set()):"), "default cache=set() is made once"),
        (method("def forward(self, x, cache=dict()):"), "default cache=dict() is made once"),
        (method("def forward(self, x, cache={1}):"), "state across calls"),
        (method("def forward(self, x, cache=[0 for _ in 'ab']):"), "state across calls"),
        (method("def forward(self, x, cache=(1, [])):"), "state across calls"),
        (method("def forward(self, x, cache=lambda: 0):"), "state across calls"),
        (method("def forward(self, x, *, cache={}):"), "default cache={} is made once"),
        (method("def forward(self, x, /, cache={}):"), "default cache={} is made once"),
        (forward("f = lambda t, seen=[]: seen\nreturn x"), "lambda: default seen=[]"),
        (
            HEAD
            + "CACHE = {}\n"
            + method("def forward(self, x, cache=CACHE):", "cache[1] = x\n        return x"),
            "shared state",
        ),
        # Decorators other than staticmethod, torch.no_grad() and torch.inference_mode().
        (method("@classmethod\ndef helper(cls, x):"), "decorates helper"),
        (method("@torch.enable_grad()\ndef forward(self, x):"), "decorates forward"),
        (method("@torch.inference_mode(False)\ndef forward(self, x):"), "decorates forward"),
        (method("@torch.no_grad\ndef forward(self, x):"), "decorates forward"),
        # Attributes set on anything but a method's own self: monkeypatching through an
        # argument, through a call's result, or through a name that only looks like self.
        (
            HEAD + "def f(m):\n    m.gelu = lambda t: t\nf(nn.functional)\n" + forward("return x"),
            "sets m.gelu",
        ),
        (forward("type(x).relu = lambda t: t\nreturn x"), "sets type(x).relu"),
        (
            HEAD
            + "def __init__(self):\n    self.gelu = abs\n__init__(nn.functional)\n"
            + forward("return x"),
            "sets self.gelu",
        ),
        (
            HEAD
            + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self = nn.functional\n        self.gelu = abs\n"
            "    def forward(self, x):\n        return x\n",
            "binds the name self",
        ),
        ("import torch as self\n" + forward("return x"), "imports torch as self"),
        ("from torch import relu as __getattr__\n" + forward("return x"), "as __getattr__"),
        # An argument is the caller's object: filled in a function that keeps no state, it is
        # the module-level cache the caller passed.
        (
            HEAD
            + "CACHE = {}\ndef keep(d, x):\n    d[0] = x\n"
            + forward("keep(CACHE, x)\nreturn x"),
            "assigns to d[0]",
        ),
        (
            HEAD
            + "CACHE = {}\ndef keep(d, x):\n    d.update(a=x)\n"
            + forward("keep(CACHE, x)\nreturn x"),
            "mutates d",
        ),
        # A constructor run again on an object that outlives the call keeps what it is given.
        (HEAD + "S = nn.Identity()\n" + forward("S.__init__()\nreturn x"), "accesses __init__"),
        # A class body's import binds a member as a def does.
        (
            HEAD + "class ModelNew(nn.Module):\n    from typing import cast as load_state_dict\n"
            "    def forward(self, x):\n        return x\n",
            "redefines nn.Module.load_state_dict",
        ),
        (forward("x.numpy().tofile('/tmp/out')\nreturn x"), "writes a file"),
        # einops: its functions and layers by name only, never the module or its internals.
        (
            "from einops.layers.torch import Rearrange\n"
            + forward("Rearrange('a -> a').multirecipe()[1].kept = x\nreturn x"),
            "recipe cache",
        ),
        ("import einops\n" + forward("return einops.rearrange(x, 'a b -> b a')"), "einops whole"),
        ("from einops import asnumpy\n" + forward("return x"), "imports einops.asnumpy"),
        ("from einops import _backends\n" + forward("return x"), "imports einops._backends"),
        ("from einops._backends import TorchBackend\n" + forward("return x"), "einops._backends"),
        ("from einops.layers.torch import EinMix\n" + forward("return x"), "EinMix"),
        ("from einops import rearrange\n" + forward("return rearrange.__globals__"), "__globals__"),
        (
            "from einops.layers.torch import Rearrange\n"
            + HEAD
            + "class R(Rearrange):\n    pass\n"
            + forward("return x"),
            "class R derives from Rearrange",
        ),
        (
            HEAD + "staticmethod = torch.no_grad\n" + method("@staticmethod\ndef f(x):"),
            "decorates f",
        ),
    ],
)
def test_rejects(source, expected):
    reasons = check_python(source, "Model", "float32")
    assert any(expected in reason for reason in reasons), reasons


def test_accepts_an_honest_candidate():
    source = (
        HEAD
        + 'SRC = "torch::Tensor f(torch::Tensor x);"\n'
        + '_ext = load_inline(name="f", cpp_sources=SRC, functions=["f"])\n'
        + "class ModelNew(nn.Module):\n    def __init__(self, dim):\n        super().__init__()\n"
        + "        self.weight = nn.Parameter(torch.ones(dim))\n"
        + "    def forward(self, input):\n        shape = list(input.shape)\n        shape[-1] = 3\n"
        + "        return _ext.f(input.contiguous()) * 1 if False else _ext.f(input.contiguous())\n"
    )
    assert check_python(source, "Model", "float32") == []


@pytest.mark.parametrize(
    "source",
    [
        method("@staticmethod\ndef helper(x):"),
        method("@torch.no_grad()\ndef forward(self, x):"),
        method("@torch.inference_mode()\ndef forward(self, x):"),
        "from torch import no_grad\n" + method("@no_grad()\ndef forward(self, x):"),
        forward("handle = x\nreturn handle.open()"),  # a method called open is not the builtin
        method(
            "def forward(self, x, scale=1.0, eps=-1e-5, dims=(0, (1, None)), name='gelu',"
            " dtype=torch.float32, *, gain=2 ** -0.5, bias=None):"
        ),
        forward("f = lambda t, k=2: t * k\nreturn f(x)"),
        # Allowed modules, reached through allowed imports.
        forward("return torch.nn.init.zeros_(torch.nn.functional.gelu(x))"),
        forward("return torch.linalg.vector_norm(torch.special.erf(torch.fft.rfft(x).real))"),
        forward("torch.cuda.current_stream().synchronize()\nreturn torch.nn.parameter.Parameter"),
        forward("return torch.utils.cpp_extension.load_inline(name='f', cpp_sources='')"),
        "import math\nimport typing\n" + forward("return math.sqrt(2) * x, typing.Any"),
        # Tensor and Module attributes named like torch submodules; self's own attribute names.
        forward("return x.cpu().cuda().data.grad, self.modules()"),
        forward("return self.memory, self.f_scale, self.package"),
        forward("self.register_forward_pre_hook(print)\nreturn x"),  # inside the timed call
        # A base's constructor; a local's contents.
        HEAD
        + CLASS.replace("super().__init__()", "nn.Module.__init__(self)")
        + "    def forward(self, x):\n        return x\n",
        forward(
            "shape = list(x.shape)\nshape[-1] = 3\nout = x.new_empty(shape)\nout[..., 0] = 1\nreturn out"
        ),
        # einops' functions and layers, by name.
        "from einops import rearrange, repeat as rep\n"
        + forward("return rep(rearrange(x, 'b (h d) -> b h d', h=2), 'b h d -> b h d')"),
        "from einops.layers.torch import Rearrange\n"
        + forward("return Rearrange('a b -> b a')(x)"),
        # A layer of torch.nn as a base, by either name.
        HEAD + "class LayerNorm(nn.LayerNorm):\n    pass\n" + forward("return x"),
        HEAD + "class Conv(torch.nn.Conv1d):\n    pass\n" + forward("return x"),
    ],
)
def test_accepts(source):
    assert check_python(source, "Model", "float32") == []


def test_half_is_fine_in_a_half_problem():
    assert check_python(forward("return x.half()"), "Model", "float16") == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("void f() { std::thread t([]{}); t.detach(); }", "threads"),
        ("void f() { pthread_create(0, 0, 0, 0); }", "threads"),
        (
            "torch::Tensor f(torch::Tensor x) { static torch::Tensor cache; return cache; }",
            "static",
        ),
        ("int f() { static int calls = 0; return ++calls; }", "static counter"),
        ('void f() { system("ls"); }', "runs or loads programs"),
        ("float f(float v) { return __half2float(__float2half(v)); }", "reduced precision"),
        ("void f() { cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }", "reduced precision"),
        ('void f() { py::module_::import("time").attr("perf_counter") = 0; }', "Python"),
        ('void f() { PyObject_SetAttrString(m, "x", v); }', "Python"),
        ("void f() { pybind11::globals(); }", "Python"),
        ("void f() { THPVariable_Wrap(t); }", "Python"),
        ("#define P(n) Py##n\nvoid f() { P(Run_SimpleString)(0); }", "pastes tokens"),
        ('void f() { asm volatile("syscall" ::: "memory"); }', "inline assembly"),
        ('void f() { __asm__("call some_function"); }', "inline assembly"),
        (
            'void f() { unsigned lo, hi; asm volatile("rdtsc" : "=a"(lo), "=d"(hi)); }',
            "inline assembly",
        ),
    ],
)
def test_native_rejects(source, expected):
    assert any(expected in reason for reason in check_native(source, "float32"))


def test_native_accepts_pybind_argument_helpers_and_ptx():
    source = """
    torch::Tensor f(torch::Tensor x, double scale);
    PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
      m.def("f", &f, py::arg("x"), py::arg("scale") = 1.0,
            py::call_guard<py::gil_scoped_release>());
    }
    __device__ float4 load(const float4* p) {
      float4 v;
      asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
                   : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p));
      return v;
    }"""
    assert check_native(source, "float32") == []


def test_native_accepts_dispatch_and_comments():
    source = """
    // a std::thread mention in a comment is fine
    static inline float gelu(float v) { return v; }
    static torch::Tensor helper(torch::Tensor x) { return x; }
    torch::Tensor f(torch::Tensor x) {
      int half = 3;
      AT_DISPATCH_FLOATING_TYPES_AND2(at::ScalarType::Half, at::ScalarType::BFloat16, x.scalar_type(), "f", [&] {});
      return helper(x);
    }"""
    assert check_native(source, "float32") == []


def test_a_forward_inherited_from_a_class_of_the_file_is_a_forward():
    base = "class Base(nn.Module):\n    def forward(self, x):\n        return x\n"
    source = HEAD + base + CLASS.replace("nn.Module", "Base")
    assert not [
        reason for reason in check_python(source, "Model", "float32") if "forward" in reason
    ]
