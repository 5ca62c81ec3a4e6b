"""The build cache is not a channel: entries verified on every read, written by the parent only,
built without locks to leave behind, bounded; build requests from a worker gated again.

The store's rules run with a compile step that writes known bytes (what is tested is what the
store does with whatever a compiler made); the attacks run for real: a library with a static
initializer planted where a candidate's build would be, and a candidate that looks for a
writable cache from inside its sandbox.
"""

from __future__ import annotations

import ctypes
import json
import threading
import time
from pathlib import Path

import pytest

from harness.builds import cache as buildcache
from harness.builds import requests
from harness.builds.cache import (
    CPU_CFLAGS,
    CPU_LDFLAGS,
    BuildFailed,
    CachedLoader,
    build_key,
    spec_key,
)
from harness.builds.compile_worker import compile_here
from harness.builds.requests import ParentBuilder
from harness.builds.store import MANIFEST, BuildSpec, BuildStore, Built
from harness.candidate_workers import candidate_view
from harness.problem.load import problem_from_target
from harness.sandbox.run import run_worker
from tests.conftest import FIXTURES

SPEC = BuildSpec(cpp="int f() { return 1; }", device="cpu")


class Compiles:
    """A compile step that writes the library it is told to, counting its calls."""

    def __init__(self, payload: bytes = b"\x7fELF built", seconds: float = 0.0) -> None:
        self.payload, self.seconds, self.calls = payload, seconds, 0

    def __call__(
        self, spec: BuildSpec, module_name: str, build_dir: Path, headers: Path | None = None
    ) -> str | None:
        self.calls += 1
        time.sleep(self.seconds)
        (build_dir / f"{module_name}.so").write_bytes(self.payload + spec.cpp.encode())
        (build_dir / "main.o").write_bytes(b"object")
        return None


def test_an_entry_is_built_once_and_then_read_verified(tmp_path):
    compiles = Compiles()
    store = BuildStore(tmp_path, compiles, 2**30)
    first = store.library(SPEC, "k1")
    second = store.library(SPEC, "k1")
    assert compiles.calls == 1 and first.library == second.library
    assert json.loads((tmp_path / "k1" / MANIFEST).read_text())["kp_k1.so"] == first.sha256


def test_a_library_planted_without_a_manifest_is_never_used(tmp_path):
    (tmp_path / "k1").mkdir()
    (tmp_path / "k1" / "kp_k1.so").write_bytes(b"planted")
    compiles = Compiles()
    built = BuildStore(tmp_path, compiles, 2**30).library(SPEC, "k1")
    assert compiles.calls == 1, "the planted library was taken for a build"
    assert built.library is not None and built.library.read_bytes() != b"planted"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda entry: (entry / "kp_k1.so").write_bytes(b"swapped after the build"),
        lambda entry: (entry / "extra.so").write_bytes(b"a library beside it"),
        lambda entry: (entry / "main.o").unlink(),
        lambda entry: (entry / MANIFEST).write_text("not json"),
    ],
    ids=["library swapped", "file added", "file removed", "manifest broken"],
)
def test_an_entry_changed_after_its_build_is_built_again(tmp_path, tamper):
    compiles = Compiles()
    store = BuildStore(tmp_path, compiles, 2**30)
    store.library(SPEC, "k1")
    tamper(tmp_path / "k1")
    built = store.library(SPEC, "k1")
    assert compiles.calls == 2
    assert built.library is not None and b"swapped" not in built.library.read_bytes()
    assert not (tmp_path / "k1" / "extra.so").exists()


def test_a_failed_or_interrupted_build_leaves_nothing_that_blocks_the_next(tmp_path):
    def interrupted(spec, module_name, build_dir, headers=None):
        (build_dir / "lock").write_text("")  # what torch's build leaves when killed
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        BuildStore(tmp_path, interrupted, 2**30).library(SPEC, "k1")
    assert not (tmp_path / "k1").exists()
    assert not list((tmp_path / ".staging").iterdir())
    built = BuildStore(tmp_path, Compiles(), 2**30).library(SPEC, "k1")
    assert built.error is None and built.library is not None


def test_two_builds_of_one_key_at_once_both_get_the_one_verified_entry(tmp_path):
    store = BuildStore(tmp_path, Compiles(seconds=0.3), 2**30)
    results = []
    threads = [threading.Thread(target=lambda: results.append(store.library(SPEC, "k1")))
               for _ in range(2)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [r.error for r in results] == [None, None]
    assert len({r.sha256 for r in results}) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [".staging", "k1"]


def test_the_cache_stays_within_its_size_least_recently_used_going_first(tmp_path):
    compiles = Compiles(payload=b"x" * 4000)
    store = BuildStore(tmp_path, compiles, 10_000)  # room for about two entries
    store.library(SPEC, "old")
    time.sleep(0.05)
    store.library(SPEC, "used")
    time.sleep(0.05)
    store.library(SPEC, "old")  # read: now the most recently used
    time.sleep(0.05)
    store.library(SPEC, "new")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != ".staging") == ["new", "old"]


# --- a worker's build request is untrusted ------------------------------------------------------


@pytest.mark.parametrize(
    "request_body, reason",
    [
        ({"cpp": 'int f() { return system("id"); }', "device": "cpu"}, "runs or loads programs"),
        ({"cpp": "int f();", "cflags": ["-fplugin=/tmp/evil.so"], "device": "cpu"}, "not allowed"),
        ({"cpp": "int f();", "cflags": ["-Dconstexpr=inline"], "device": "cpu"}, "keyword"),
        ({"cpp": "int f();", "cuda": "__global__ void k() {}", "device": "cpu"}, "CUDA sources"),
        ({"cpp": "int f();", "device": "cuda", "arch": "9.0; rm -rf"}, "a build for cuda"),
        ({"cpp": 7}, "malformed"),
    ],
    ids=["forbidden call", "flag", "keyword define", "cuda on cpu", "device", "malformed"],
)
def test_the_parent_gates_a_build_request_again(tmp_path, request_body, reason):
    builder = ParentBuilder(tmp_path, "bubblewrap", 60, 2**30)
    answer = builder.answer(request_body, "cpu", "float32")
    assert answer["library"] is None and reason in answer["error"]
    assert not [p for p in tmp_path.iterdir() if p.name != ".staging"]


def test_the_parent_keys_a_build_itself():
    """A worker cannot name the key its build lands under: the parent hashes the request."""
    spec = BuildSpec(cpp="int f();", cflags=list(CPU_CFLAGS), ldflags=list(CPU_LDFLAGS))
    assert spec_key(spec) == build_key("int f();", "", None, CPU_CFLAGS, [], CPU_LDFLAGS, "cpu")
    assert spec_key(spec) != spec_key(spec.model_copy(update={"cpp": "int g();"}))


def test_no_implicit_headers_reaches_the_build_and_its_key(tmp_path):
    """A candidate that includes what it uses (no_implicit_headers=True) is built so, under a
    key of its own: the same sources with torch's headers put first are another build."""
    asked: list[BuildSpec] = []

    def builder(spec: BuildSpec, key: str) -> Built:
        asked.append(spec)
        return Built(key=key, error="not built here")

    loader = CachedLoader(tmp_path, "cpu", "float32", builder=builder)
    for flag in (True, False):
        with pytest.raises(BuildFailed):
            loader("m", "#include <torch/extension.h>\nint f();", functions=["f"],
                   no_implicit_headers=flag)  # fmt: skip
    assert [spec.implicit_headers for spec in asked] == [False, True]
    assert spec_key(asked[0]) != spec_key(asked[1])


def test_no_implicit_headers_on_a_torch_without_it_is_refused_with_the_reason(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(buildcache, "HAS_NO_IMPLICIT_HEADERS", False)
    monkeypatch.setattr(requests, "HAS_NO_IMPLICIT_HEADERS", False)
    loader = CachedLoader(tmp_path, "cpu", "float32", builder=lambda spec, key: pytest.fail())
    with pytest.raises(BuildFailed, match="no no_implicit_headers argument"):
        loader("m", "int f();", functions=["f"], no_implicit_headers=True)
    spec = SPEC.model_copy(update={"implicit_headers": False})
    assert any(
        "no_implicit_headers" in reason for reason in ParentBuilder.problems(spec, "cpu", "float32")
    )


# --- the attacks, for real ------------------------------------------------------------------------
MARKER = b"KP_PLANTED_LIBRARY_LOADED"
PLANTED = (
    "#include <torch/extension.h>\n#include <cstdlib>\n"
    f'static int planted = setenv("{MARKER.decode()}", "1", 1);\n'
    "torch::Tensor same(torch::Tensor x) { return x; }\n"
)
HONEST = "#include <torch/extension.h>\ntorch::Tensor same(torch::Tensor x) { return x.clone(); }\n"


def _getenv(name: bytes) -> bytes | None:
    getenv = ctypes.CDLL(None).getenv
    getenv.restype = ctypes.c_char_p
    return getenv(name)


@pytest.mark.slow
def test_a_planted_library_with_a_static_initializer_is_never_loaded(tmp_path):
    """The attack as it was: a library in the persistent cache, where the honest source's build
    would be, whose static initializer runs the moment it is loaded."""
    key = build_key(HONEST, "", ["same"], CPU_CFLAGS, [], CPU_LDFLAGS, "cpu")
    planted = tmp_path / "planted"
    planted.mkdir()
    spec = BuildSpec(cpp=PLANTED, functions=["same"], cflags=list(CPU_CFLAGS),
                     ldflags=list(CPU_LDFLAGS))  # fmt: skip
    assert compile_here(spec, "planted", planted) is None
    cache = tmp_path / "cache"
    (cache / key).mkdir(parents=True)
    (cache / key / f"kp_{key}.so").write_bytes((planted / "planted.so").read_bytes())
    loader = CachedLoader(cache, "cpu", "float32")
    module = loader("x", HONEST, functions=["same"])
    assert _getenv(MARKER) is None, "the planted library's static initializer ran"
    assert module.same is not None and (cache / key / MANIFEST).is_file()


def test_a_candidate_worker_finds_no_writable_cache_or_checkout(tmp_path):
    """Code in a candidate's sandbox (the view the evaluator gives it) writes into every mount
    it can: only its job folder and its own /tmp take a write."""
    cache, job_dir = tmp_path / "cache", tmp_path / "job"
    for folder in (cache, job_dir):
        folder.mkdir()
    (job_dir / "probe.json").write_text("{}")
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    view = candidate_view(problem, cache)
    outcome = run_worker(job_dir, 120, None, view, "bubblewrap", entry="tests.sandbox.probe")
    assert outcome.results(), outcome.log_tail
    writable = outcome.results()[0].body["writable_mounts"]
    # "/" is bubblewrap's own root, a tmpfs of the sandbox's: gone with it, seen by no one else.
    assert sorted(writable) == sorted(["/", "/tmp", str(job_dir)]), writable
    assert not list(cache.rglob(".kp-probe-*")) and not list(FIXTURES.rglob(".kp-probe-*"))


@pytest.mark.slow
def test_a_first_build_into_a_new_cache_is_seen_by_the_candidates_worker(tmp_path):
    """A sandbox shows only folders that exist when it starts: a cache made by the first build,
    while the candidate's worker was already running, was invisible to it (found by act)."""
    from harness.evaluate import Evaluator
    from harness.records import Candidate, Status
    from tests.conftest import fast_config

    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    evaluator = Evaluator(fast_config(cache_dir=tmp_path / "new" / "cache"), seed=2)
    honest = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
    result = evaluator.evaluate(problem, honest)
    assert result.status is Status.ok, result.reason + result.log
