"""The contract's prose answers, each against the code that makes it true.

Which architecture ``load_inline`` builds for (harness/builds/cache.py sets
TORCH_CUDA_ARCH_LIST; torch turns it into nvcc's flags), what happens to ``load_inline``
inside ``forward``, the nn.Module names a candidate may not define, and the headers and
Hopper spellings the contract names as fine. The sample spellings are in
tests/test_contract_examples.py.
"""

from __future__ import annotations

import os
import re
import types
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

from agents.contract import candidate_contract
from harness.builds import cache as buildcache
from harness.builds.requests import ParentBuilder
from harness.builds.store import Built, file_sha256
from harness.static.native import check_native
from harness.static.python import GateRejection, check_python
from harness.static.python_rules import MODULE_METHODS
from tests.test_contract import candidate, with_method


@pytest.fixture
def hopper(monkeypatch: pytest.MonkeyPatch):
    """A visible GPU of compute capability 9.0 (H100, H200); the process environment restored."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "")
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *device: (9, 0))


def test_cuda_builds_target_the_devices_own_capability_only(hopper, tmp_path: Path):
    buildcache.CachedLoader(tmp_path, "cuda", "float32", builder=lambda spec, key: Built(key=key))
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0"
    # What torch hands nvcc for the harness's own nvcc flags: sm_90 machine code, no sm_90a
    # (wgmma, setmaxnreg) and no PTX for other GPUs.
    flags = cpp_extension._get_cuda_arch_flags(list(buildcache.CUDA_BASE_FLAGS))
    assert flags == ["-gencode=arch=compute_90,code=sm_90"]
    text = candidate_contract("cuda", "float32")
    assert "`9.0` on H100/H200: `sm_90`, `__CUDA_ARCH__` 900" in text
    assert "`sm_90a`-only instructions (`wgmma`, `setmaxnreg`) do not build" in text


@pytest.mark.parametrize("flag", ["-Dmy_arch=1", "-Uarch", "-march=native"])
def test_no_nvcc_flag_takes_the_architecture_away(hopper, tmp_path: Path, flag: str):
    """torch adds the device's -gencode only when no nvcc flag mentions "arch"; such a flag
    would leave nvcc to build for its default target, so the loader and the parent refuse it."""
    assert cpp_extension._get_cuda_arch_flags([flag]) == []  # why the rule exists
    loader = buildcache.CachedLoader(tmp_path, "cuda", "float32", builder=_no_build)
    with pytest.raises(GateRejection, match="names 'arch'"):
        loader("m", "int f();", "__global__ void k() {}", ["f"], extra_cuda_cflags=[flag])
    body = {"cpp": "int f();", "cuda": "__global__ void k() {}", "device": "cuda",
            "arch": "9.0", "cuda_flags": ["-O3", flag]}  # fmt: skip
    answer = ParentBuilder(tmp_path, "bubblewrap", 60, 2**30).answer(body, "cuda", "float32")
    assert answer["library"] is None and "names 'arch'" in answer["error"]
    # A host flag is not nvcc's: -march=native stays allowed there.
    assert buildcache.cuda_flag_problems(["-O3", "--use_fast_math", "-lineinfo"]) == []


def _no_build(spec, key):
    raise AssertionError("a refused request reached the builder")


def test_load_inline_inside_forward_is_not_refused_but_rechecks_every_call(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """What the contract says of ``load_inline`` inside ``forward``: the static gate lets it
    through, and each call goes through the build cache and the built library's checks again."""
    lazy = candidate('_lazy = load_inline(name="kp_lazy", cpp_sources="", functions=["f"])')
    assert check_python(lazy, "Model", "float32") == []
    library = tmp_path / "kp_lazy.so"
    library.write_bytes(b"not really a library")
    built, checked = [], []

    def builder(spec, key):
        built.append(key)
        return Built(key=key, library=library, sha256=file_sha256(library))

    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))
    monkeypatch.setattr(buildcache, "check_binary", lambda path: checked.append(path) or [])
    monkeypatch.setattr(
        buildcache, "_load_library", lambda name, path: types.SimpleNamespace(f=lambda: 1)
    )
    loader = buildcache.CachedLoader(tmp_path, "cpu", "float32", builder=builder)
    for _ in range(3):  # three forwards
        assert loader("kp_lazy", "int f() { return 1; }", functions=["f"]).f() == 1
    assert len(built) == 3 and len(set(built)) == 1 and checked == [library] * 3
    assert "not refused, but\n  every call then re-checks the built library" in (
        candidate_contract("cpu", "float32")
    )


def test_the_module_method_rule_is_the_gates_table():
    """Every name nn.Module has is refused as a ModelNew member but the ones the contract
    names as free; those pass."""
    text = candidate_contract("cpu", "float32")
    free = [name for name in dir(torch.nn.Module) if not name.startswith("__")]
    free = [name for name in free if name not in MODULE_METHODS]
    assert free and all(f"`{name}`" in text for name in free)
    for name in free:
        assert check_python(with_method(f"def {name}(self):\n        return ''"), "Model",
                            "float32") == [], name  # fmt: skip
    for name in sorted(MODULE_METHODS):
        source = with_method(f"def {name}(self):\n        return self")
        assert check_python(source, "Model", "float32"), name


def test_cpu_builds_target_the_machines_own_instruction_set():
    assert "-march=native" in buildcache.CPU_CFLAGS
    assert "`-march=native` targets this machine's own instruction set" in (
        candidate_contract("cpu", "float32")
    )


@pytest.mark.parametrize(
    "source",
    [
        "#include <immintrin.h>\nfloat f(float v) { return v; }",
        "__global__ void __cluster_dims__(2, 1, 1) k(float* p) { p[threadIdx.x] = 0.0f; }",
        '__global__ void k(float* p) { asm volatile("cp.async.bulk.commit_group;"); }',
        "void f() { cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, "
        "64 * 1024); }",
    ],
    ids=["immintrin", "cluster dims", "bulk copy asm", "smem attribute"],
)
def test_what_the_contract_names_as_fine_passes_the_native_gate(source: str):
    assert check_native(source, "float32") == []


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_stage_tag_names_a_stage_or_a_check_the_harness_reports(device: str):
    """A rejection names its stage or its check; the contract's tags use the same names."""
    root = Path(__file__).resolve().parent.parent / "harness"
    reported = "\n".join(path.read_text() for path in root.rglob("*.py"))
    text = candidate_contract(device, "float32")
    tags = re.findall(r"\[((?:static|native|symbols|run:)[a-z_:, ]*)\]", text)
    assert {"static", "native", "symbols"} <= set(tags)
    checks = {
        name
        for tag in tags
        if tag.startswith("run:") and tag != "run:name"
        for name in tag.removeprefix("run:").split(", ")
    }
    assert {"no_input_alias", "no_pytorch_compute", "fresh_outputs"} <= checks
    for name in checks:
        assert f'"{name}"' in reported, f"[run:{name}] names no check the harness reports"


def test_a_cpu_candidates_flags_are_kept_only_where_the_contract_says(tmp_path: Path):
    """The contract: the fixed flags, then only the candidate's -D/-U/-std flags; the rest of
    the allow-list (-ffast-math) is accepted and dropped."""
    asked = []

    def builder(spec, key):
        asked.append(spec.cflags)
        return Built(key=key, error="stop here")

    loader = buildcache.CachedLoader(tmp_path, "cpu", "float32", builder=builder)
    with pytest.raises(buildcache.BuildFailed):
        loader("m", "int f() { return 1; }", None, ["f"],
               extra_cflags=["-ffast-math", "-DKP_WIDTH=8", "-std=c++20", "-O2"])  # fmt: skip
    assert asked == [[*buildcache.CPU_CFLAGS, "-DKP_WIDTH=8", "-std=c++20"]]
    text = candidate_contract("cpu", "float32")
    assert "only\n  those starting `-D`, `-U`, `-std` are kept" in text
    assert "(`-ffast-math`, `-O2`, ...) are accepted and dropped" in text
