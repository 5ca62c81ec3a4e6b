"""Shared fixtures: fast evaluation settings and the paths of test inputs."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

# torch.compile's C++ builds precompile torch's headers into one folder per machine user
# (/tmp/torchinductor_<user>/precompiled_headers: TORCHINDUCTOR_CACHE_DIR does not move it),
# shared by every process on the machine. The tests compile in this process too, and a compile
# must not depend on what other runs left there (a fresh clone's suite once failed such a build
# with a C++ compile error). Set before torch is imported: its config reads it then; workers
# inherit it. (kernelpilot's own precompiled headers for candidate builds are another thing.)
os.environ.setdefault("TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS", "0")

import pytest  # noqa: E402
import torch  # noqa: E402

from harness.config import EvalConfig

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# The examples the offline proposer is tested on, as targets relative to ROOT.
EXAMPLES = {
    "fused_gelu_block": "examples/fused_gelu_block.py",
    "swiglu": "examples/swiglu.py",
    "residual_gate": "examples/repo_style/blocks.py:ResidualGate",
}


def embedded_source(candidate: str, name: str) -> str:
    """The C++ or CUDA text a generated candidate holds as ``name = r\"\"\"...\"\"\"``
    (``_CPP_SOURCE``, ``_CUDA_SOURCE``)."""
    return candidate.split(f'{name} = r"""', 1)[1].split('"""', 1)[0]


def write_module(directory: Path, name: str, source: str) -> Path:
    """A Python file ``name``.py in ``directory`` holding ``source`` (dedented)."""
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def fast_config(**overrides) -> EvalConfig:
    """Full verification, short timing, no torch.compile baseline (it takes minutes on cpu)."""
    settings = {"compile_baseline": False, "time_budget_s": 0.2, "min_reps": 5, "max_reps": 50}
    # A cache of the test's own is built once: precompiling torch's headers for it (75 s on
    # 2 cores) would cost more than it saves. The shared one pays it once for every test.
    settings["precompiled_headers"] = "cache_dir" not in overrides
    settings.update(overrides)
    return EvalConfig(**settings)


@pytest.fixture
def fast() -> EvalConfig:
    return fast_config()


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fake_openai():
    """A real OpenAI-compatible server on 127.0.0.1 (tests/fake_openai.py), stopped after the test."""
    from tests.fake_openai import FakeOpenAI

    # Stopped after the test; the lifetime is only a bound for a server left running. The
    # end-to-end search tests build and time real kernels: on a loaded 2-core machine they
    # outlast 60 s, and a server gone mid-test turns the last steps into failed calls.
    with FakeOpenAI(lifetime_s=1800.0) as server:
        yield server


@pytest.fixture
def fake_github():
    """A stateful GitHub REST API on 127.0.0.1 (the tests/fake_github package), stopped after the test.

    Point PyGithub at ``fake_github.base_url`` (``fake_github.client(token)`` does, without
    PyGithub's request throttling); a bug of the fake itself (a 500 it answered) fails the test.
    """
    from tests.fake_github import FakeGitHub

    with FakeGitHub(lifetime_s=1800.0) as server:  # a workflow run under act outlasts 120 s
        yield server
        assert not server.errors, f"fake_github answered 500 for its own bugs: {server.errors}"
