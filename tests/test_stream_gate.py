"""The stream gate (harness/stream_gate.c, harness/stream_gate.py) where no GPU is needed: it
builds warning-free, it interposes every stream-queuing call the symbol allow-list lets a
kernel library make (and the allow-list refuses the others), it takes effect only when
preloaded, and the checks' worker on cuda is started with it. That it holds work back on a
device is shown by the CUDA red-team entries it catches (tests/test_corpus.py, -m gpu) and by
bench/gpu_stream_gate.py, which runs them with the gate on and off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness import stream_gate
from harness.symbols import STREAM_GATED, STREAM_WORK, symbol_problems


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stream_gate.build(tmp_path_factory.mktemp("cache"))


def _exported(library: Path) -> set[str]:
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1] for line in listing.splitlines() if line.strip()}


def test_the_gate_interposes_every_stream_call_a_kernel_library_may_make(library: Path):
    exported = _exported(library)
    missing = sorted(STREAM_GATED - exported)
    assert not missing, f"allowed to kernel libraries but not held by the gate: {missing}"
    for name in STREAM_GATED:
        assert STREAM_WORK.fullmatch(name), f"{name} is not recognized as queuing stream work"
    # The blocking calls that must open the gate rather than wait for it forever.
    assert {"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize"} <= exported
    assert {"cublasSetStream_v2", "cublasLtMatmul", "cudaStreamDestroy"} <= exported


def test_stream_work_the_gate_cannot_hold_is_refused():
    for name in ("cudaMemcpy3DAsync", "cudaMemcpyPeerAsync", "cudaMemcpyBatchAsync"):
        reasons = symbol_problems([name])
        assert reasons and "cannot hold back" in reasons[0], (name, reasons)
    for name in ("cudaMemcpyAsync", "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC"):
        assert symbol_problems([name]) == [], name


def test_the_gate_library_calls_no_kernel_library_may_call(library: Path):
    """kp_gate_* are the harness's: a kernel library that imported one would be refused."""
    own = {name for name in _exported(library) if name.startswith("kp_gate_")}
    assert own >= {"kp_gate_init", "kp_gate_hold", "kp_gate_release", "kp_gate_counts"}
    for name in own:
        assert symbol_problems([name]), f"a kernel library may call {name}"


PROBE = """
import ctypes, os, sys
gate = ctypes.CDLL(sys.argv[1])
print(gate.kp_gate_interposes())
"""


@pytest.mark.parametrize("preloaded", [True, False])
def test_the_gate_takes_effect_only_when_preloaded(library: Path, preloaded: bool):
    env = {"LD_PRELOAD": str(library)} if preloaded else {}
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(library)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == ("1" if preloaded else "0")


def test_the_worker_environment_preloads_the_gate(tmp_path: Path):
    env = stream_gate.worker_environment(tmp_path)
    assert env["LD_PRELOAD"] == env[stream_gate.PATH_VARIABLE]
    assert Path(env["LD_PRELOAD"]).is_file()
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == stream_gate.MAX_CONNECTIONS
    # Built once per source: the second call finds the first build.
    assert stream_gate.worker_environment(tmp_path) == env


def test_only_the_checks_worker_on_cuda_gets_the_gate(monkeypatch, tmp_path: Path):
    from harness import evaluate
    from harness.records import Candidate
    from harness.sandbox import WorkerOutcome

    seen: list[tuple[str, dict[str, str] | None]] = []

    def run_worker(job_dir, timeout, memory, on_outputs, isolate_network, extra_env):
        seen.append((job_dir.name.split("-")[0], extra_env))
        return WorkerOutcome(returncode=1, timed_out=False, seconds=0.0, log_tail="")

    monkeypatch.setattr(evaluate, "run_worker", run_worker)
    evaluator = evaluate.Evaluator(work_dir=tmp_path / "work")
    from harness.problem import problem_from_target

    example = Path(__file__).resolve().parent / "redteam" / "problems" / "bias_gelu.py"
    for device in ("cpu", "cuda"):
        problem = problem_from_target(str(example), "cpu", "float32")
        problem = problem.model_copy(update={"device": device})
        for mode in ("build", "evaluate", "time"):
            evaluator._run_candidate(problem, Candidate(source="x = 1"), mode, None)
    gated = [(mode, env) for mode, env in seen if env]
    assert [mode for mode, _ in gated] == ["evaluate"], seen
    assert gated[0][1] is not None and "LD_PRELOAD" in gated[0][1]
