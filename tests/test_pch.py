"""Precompiled torch headers: made once per cache from the flags of a build that used none,
used by the builds after it (the compiler's own record shows it read the precompiled file, not
torch's headers), never used where they no longer match their hashes or where a candidate's
own flags could change what the headers mean."""

from __future__ import annotations

from pathlib import Path

from harness.builds.cache import CPU_CFLAGS, CPU_LDFLAGS, spec_key
from harness.builds.pch import CUDA_HOST_CFLAGS, HEADER, HEADER_LINE, pch_key
from harness.builds.requests import ParentBuilder
from harness.builds.store import BuildSpec
from harness.config import EvalConfig

SOURCE = "torch::Tensor twice(torch::Tensor x) {{ return x * {factor}; }}"


def spec(factor: int, cflags: list[str] = CPU_CFLAGS) -> BuildSpec:
    return BuildSpec(
        cpp=SOURCE.format(factor=factor), functions=["twice"], cflags=list(cflags),
        ldflags=CPU_LDFLAGS, device="cpu",
    )  # fmt: skip


def read_torch_headers(entry: Path) -> bool:
    """Whether the build's object depended on the one-line header as text (ninja's record of
    main.o's dependencies): with the precompiled file used, it did not."""
    return HEADER.encode() in (entry / ".ninja_deps").read_bytes()


def test_builds_after_the_first_use_the_precompiled_headers(tmp_path):
    builder = ParentBuilder(tmp_path, EvalConfig().sandbox, 900, 2**34, precompiled_headers=True)
    store = builder.store
    first = spec(2)
    assert store.headers(first) is None
    built = store.library(first, spec_key(first))
    assert built.error is None, built.error
    folder = store.headers(first)
    assert folder is not None and (folder / f"{HEADER}.gch").stat().st_size > 1_000_000
    assert f"-include {folder / HEADER}" not in (tmp_path / built.key / "build.ninja").read_text()

    second = spec(3)
    built = store.library(second, spec_key(second))
    assert built.error is None, built.error
    entry = tmp_path / built.key
    assert f"-include {folder / HEADER}" in (entry / "build.ninja").read_text()
    assert not read_torch_headers(entry)

    # a candidate's own define could change what the headers mean: built as before
    defined = spec(4, [*CPU_CFLAGS, "-DKP_FACTOR=4"])
    assert pch_key(defined) is None and store.headers(defined) is None
    # a CUDA build's C++ file takes them too (its .cu file is nvcc's), with a header of its own
    cuda = BuildSpec(cpp="", cflags=CUDA_HOST_CFLAGS, device="cuda", arch="9.0")
    assert pch_key(cuda) not in (None, pch_key(first))
    assert pch_key(cuda.model_copy(update={"cflags": [*CUDA_HOST_CFLAGS, "-DN=1"]})) is None

    # a C++ file that includes what it uses is served only where it begins with the header's
    # line: otherwise the precompiled header would decide whether it compiles at all
    bare = spec(5).model_copy(update={"implicit_headers": False})
    assert pch_key(bare) is None and store.headers(bare) is None
    failed = store.library(bare, spec_key(bare)).error  # as it would without the header made
    assert failed is not None and "error:" in failed, failed
    own = bare.model_copy(update={"cpp": f"\n{HEADER_LINE}{bare.cpp}"})
    assert pch_key(own) == pch_key(first)
    built = store.library(own, spec_key(own))
    assert built.error is None, built.error
    assert f"-include {folder / HEADER}" in (tmp_path / built.key / "build.ninja").read_text()

    # changed after it was made: not used (the build reads torch's headers as text)
    with (folder / f"{HEADER}.gch").open("r+b") as handle:
        handle.seek(4096)
        handle.write(b"\0" * 16)
    fresh = ParentBuilder(tmp_path, EvalConfig().sandbox, 900, 2**34, precompiled_headers=True)
    assert fresh.store.headers(second) is None
