"""The stream gate (harness/workers/native/stream_gate.c, harness/workers/stream_hold.py) where no GPU is needed: it
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

from harness.static.symbols import STREAM_GATED, STREAM_WORK, symbol_problems
from harness.workers import stream_hold as stream_gate


@pytest.fixture(scope="module")
def library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return stream_gate.build(tmp_path_factory.mktemp("cache"), strict=True)


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
    assert {
        "cublasSetStream_v2",
        "cublasLtMatmul",
        "cudnnSetStream",
        "cudaStreamDestroy",
    } <= exported


def test_stream_work_the_gate_cannot_hold_is_refused():
    refused = ("cudaMemcpy3DAsync", "cudaMemcpyPeerAsync", "cudaMemcpyBatchAsync", "cudaMemcpy3D")
    refused += ("cudaMemcpyPeer", "cudaMemset3D", "cublasSetVectorAsync", "cublasLtMatrixTransform")
    for name in refused:
        reasons = symbol_problems([name])
        assert reasons and "cannot hold back" in reasons[0], (name, reasons)
    allowed = ("cudaMemcpyAsync", "__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC", "cudaMemset")
    allowed += (
        "cudaMemcpyToSymbol",
        "cublasSgemm_v2",
        "cudaStreamWaitEvent",
        "cudaStreamSynchronize_ptsz",
    )
    for name in allowed:
        assert symbol_problems([name]) == [], name
    # Nor may a kernel library walk the loaded libraries (to find the gate's own functions).
    assert symbol_problems(["dl_iterate_phdr"])


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
    from harness import candidate_workers, evaluate
    from harness.records import Candidate
    from harness.sandbox.run import WorkerOutcome

    seen: list[tuple[str, dict[str, str] | None]] = []

    def run_worker(job_dir, timeout, memory, view, isolation, on_outputs, extra_env, **_):
        seen.append((job_dir.name.split("-")[0], extra_env))
        return WorkerOutcome(returncode=1, timed_out=False, seconds=0.0, log_tail="")

    monkeypatch.setattr(candidate_workers, "run_worker", run_worker)
    from harness.config import EvalConfig

    # No compiled baseline: its timing workers would get its cache, not the gate (another test).
    evaluator = evaluate.Evaluator(EvalConfig(compile_baseline=False), work_dir=tmp_path / "work")
    from harness.problem.load import problem_from_target

    example = Path(__file__).resolve().parent / "redteam" / "problems" / "bias_gelu.py"
    for device in ("cpu", "cuda"):
        problem = problem_from_target(str(example), "cpu", "float32")
        problem = problem.model_copy(update={"device": device})
        for mode in ("build", "evaluate", "time"):
            evaluator.workers.run(problem, Candidate(source="x = 1"), mode, None)
    gated = [(mode, env) for mode, env in seen if env]
    assert [mode for mode, _ in gated] == ["evaluate"], seen
    assert gated[0][1] is not None and "LD_PRELOAD" in gated[0][1]


# --- the gate's logic, over a CUDA that runs on no device (tests/fake_cuda) -----------------

CALLER, SIDE, OTHER = 0x100, 0x200, 0x300


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests import fake_cuda

    return fake_cuda.build(tmp_path_factory.mktemp("fake_cuda"))


def _run(fake: Path, library: Path, scenario: str):
    from tests import fake_cuda

    return fake_cuda.run(fake, library, scenario)


def test_calls_reach_the_real_runtime_unchanged_without_a_hold(fake: Path, library: Path):
    """Forwarding: a privately loaded runtime is found, and every argument (a dim3 by value
    among them) and the return code pass through; nothing is held without a hold."""
    run = _run(fake, library, f"said['code'] = candidate.launch({SIDE})")
    assert run.said["code"] == 42
    assert run.log == [
        f"__cudaLaunchKernel function=0xf00 grid=2,3,4 block=32,1,1 args=0x1234 shared=128 "
        f"stream={SIDE:#x}"
    ]


def test_a_hold_gates_other_streams_once_and_never_the_callers(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({CALLER})
        candidate.launch({SIDE})
        candidate.launch({SIDE})
        candidate.launch_classic(0)          # the legacy default stream
        candidate.launch_per_thread(0)       # this thread's default stream
        said['held'] = ready({SIDE}, 1, 2)
        said['caller'] = ready({CALLER})
        said['during'] = counts()
        gate.kp_gate_release()
        said['released'] = ready({SIDE}, 1, 2)
        """,
    )
    waits = [line for line in run.log if line.startswith("wait")]
    assert waits == [
        f"wait stream={SIDE:#x} value=1 flags=0",
        "wait stream=0x1 value=1 flags=0",
        "wait stream=0x2 value=1 flags=0",
    ]
    # The wait comes before the first launch on its stream; the caller's stream has none.
    first_side = next(i for i, line in enumerate(run.log) if f"stream={SIDE:#x}" in line)
    assert run.log[first_side] == waits[0]
    assert run.log[first_side + 1].startswith("__cudaLaunchKernel")
    assert run.said["held"] == [0, 0, 0] and run.said["caller"] == [1]
    assert run.said["released"] == [1, 1, 1]
    assert run.said["during"] == {"waits": 3, "streams": 3, "imprecise": 0, "failures": 0}


def test_the_release_opens_what_the_callers_stream_waits_for_and_nothing_else(
    fake: Path, library: Path
):
    """Joined: SIDE's kernel, then an event on SIDE that the caller's stream waits for, then
    more work on SIDE after the event (behind a wait of its own). OTHER is never joined."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        candidate.wait_event({CALLER}, 0xe1)
        candidate.launch({SIDE})           # after the event: not what the caller waits for
        candidate.launch({OTHER})
        said['before'] = ready({CALLER}, {SIDE}, {OTHER})
        gate.kp_gate_open_callers_waits()
        said['opened'] = ready({CALLER}, {SIDE}, {OTHER})
        gate.kp_gate_release()
        said['released'] = ready({CALLER}, {SIDE}, {OTHER})
        said['counts'] = counts()
        """,
    )
    assert run.said["before"] == [0, 0, 0]
    assert run.said["opened"] == [1, 0, 0]  # the caller goes on; SIDE's later work and OTHER wait
    assert run.said["released"] == [1, 1, 1]
    waits = [line for line in run.log if line.startswith("wait")]
    assert waits == [
        f"wait stream={SIDE:#x} value=1 flags=0",
        f"wait stream={SIDE:#x} value=2 flags=0",  # a fresh wait after the event
        f"wait stream={OTHER:#x} value=1 flags=0",
    ]
    assert run.said["counts"] == {"waits": 3, "streams": 2, "imprecise": 0, "failures": 0}


def test_a_join_through_another_held_stream_is_followed(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({OTHER})
        candidate.record(0xe1, {OTHER})
        candidate.wait_event({SIDE}, 0xe1)   # SIDE waits for OTHER's kernel
        candidate.launch({SIDE})
        candidate.record(0xe2, {SIDE})
        candidate.wait_event({CALLER}, 0xe2)  # the caller waits for SIDE, so for OTHER too
        candidate.launch({OTHER})              # after the event: held still
        gate.kp_gate_open_callers_waits()
        said['opened'] = ready({CALLER}) + [driver.fake_event_ready(e) for e in (0xe1, 0xe2)]
        said['later'] = ready({OTHER})
        gate.kp_gate_release()
        """,
    )
    assert run.said["opened"] == [1, 1, 1] and run.said["later"] == [0]


def test_a_synchronize_opens_exactly_what_it_waits_for(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.launch({OTHER})
        said['stream'] = candidate.sync_stream({SIDE})
        said['after_stream'] = ready({SIDE}, {OTHER})
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        candidate.launch({SIDE})
        said['event'] = candidate.sync_event(0xe1)
        said['after_event'] = [driver.fake_event_ready(0xe1), *ready({SIDE}, {OTHER})]
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["stream"] == 0 and run.said["after_stream"] == [1, 0]
    assert run.said["event"] == 0 and run.said["after_event"] == [1, 0, 0]
    assert run.said["counts"]["imprecise"] == 0


def test_a_device_synchronize_opens_everything_and_later_work_is_held_again(
    fake: Path, library: Path
):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        said['code'] = candidate.sync_device()
        candidate.launch({SIDE})
        said['again'] = ready({SIDE})
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    kinds = [line.split()[0] for line in run.log]
    assert kinds == [
        "wait",
        "__cudaLaunchKernel",
        "device_synchronize",
        "wait",
        "__cudaLaunchKernel",
    ]
    assert run.log[2] == "device_synchronize ready=1" and run.said["code"] == 0
    assert run.log[3].endswith("value=2 flags=0") and run.said["again"] == [0]
    assert run.said["counts"]["imprecise"] == 0  # it waits for everything: nothing is lost


def test_calls_that_wait_for_nothing_held_open_nothing(fake: Path, library: Path):
    """A free of nothing, a copy between device buffers and a synchronize of a stream that
    waits for nothing held leave the gate closed: none of them can release a cheat's work."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.free_memory(None)
        candidate.copy_sync(0x1000, 0x2000, 3)
        candidate.sync_stream({CALLER})
        said['side'] = ready({SIDE})
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["side"] == [0]
    assert run.said["counts"]["imprecise"] == 0
    assert "free pointer=(nil) ready=0" in run.log


def test_a_free_synchronizes_everything_first(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.free_memory(0x1000)
        gate.kp_gate_release()
        """,
    )
    assert "device_synchronize ready=1" in run.log
    assert "free pointer=0x1000 ready=1" in run.log


def test_a_query_of_held_work_drains_it_and_makes_the_hold_imprecise(fake: Path, library: Path):
    """Held work answers a query as work that finishes; what the query let go ran before
    forward went on, which it would not have without the gate: the hold is not a test of that
    call any more, and says so. A query of the caller's stream changes nothing."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        said['caller'] = candidate.query_stream({CALLER})
        said['quiet'] = counts()['imprecise']
        said['side'] = candidate.query_stream({SIDE})
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["caller"] == 0 and run.said["quiet"] == 0
    assert run.said["side"] == 0  # finished, not "not ready"
    assert f"stream_query stream={SIDE:#x} ready=1" in run.log
    assert run.said["counts"]["imprecise"] == 1


def test_a_copy_from_pageable_memory_opens_the_legacy_stream_and_blocking_streams(
    fake: Path, library: Path
):
    blocking, non_blocking = 0x2000, SIDE
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch_classic(0)             # legacy
        candidate.launch({blocking})
        candidate.launch({non_blocking})
        candidate.copy_sync(0x7f0000000000, 0x1000, 2)   # device to pageable host memory
        said['after'] = ready(1, {blocking}, {non_blocking})
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert any(
        line.startswith("memcpy_sync") and line.endswith("legacy_ready=1") for line in run.log
    )
    assert run.said["after"] == [1, 1, 0]  # the non-blocking stream is not waited for
    assert run.said["counts"]["imprecise"] == 0


def test_copies_from_pageable_memory_are_not_held(fake: Path, library: Path):
    """An async copy that may make the host wait for its stream is not held (it would wait
    forever); one between device buffers is."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.copy(0x1000, 0x2000, 3, {SIDE})        # device to device
        candidate.copy(0x7f0000000000, 0x2000, 2, {OTHER})  # to pageable host memory
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    waits = [line for line in run.log if line.startswith("wait")]
    assert waits == [f"wait stream={SIDE:#x} value=1 flags=0"]
    assert run.said["counts"]["waits"] == 1


def test_a_destroyed_stream_is_opened_at_the_release(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.destroy({SIDE})
        said['destroyed'] = ready({SIDE})
        gate.kp_gate_release()
        said['released'] = ready({SIDE})
        """,
    )
    assert [line.split()[0] for line in run.log] == ["wait", "__cudaLaunchKernel", "destroy"]
    assert run.said == {"destroyed": [0], "released": [1]}


def test_more_streams_than_the_gate_holds_is_a_failure_not_a_pass(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        for stream in range(0x10000, 0x10000 + 1025):
            candidate.launch(stream)
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["counts"]["streams"] == 1024 and run.said["counts"]["failures"] == 1


def test_a_hold_whose_caller_joins_nothing_is_a_clean_test(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({CALLER})
        gate.kp_gate_forward_returned()
        gate.kp_gate_open_callers_waits()
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["counts"] == {"waits": 0, "streams": 0, "imprecise": 0, "failures": 0}


def test_a_join_cuda_refused_is_not_followed(fake: Path, library: Path):
    """A wait CUDA rejected (bad flags) orders nothing: the gate must not let SIDE go for it."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        said['code'] = candidate.wait_event_flags({CALLER}, 0xe1, 0x100)
        gate.kp_gate_open_callers_waits()
        said['side'] = driver.fake_event_ready(0xe1)
        gate.kp_gate_release()
        """,
    )
    assert run.said["code"] != 0 and run.said["side"] == 0


def test_a_destroyed_event_is_forgotten(fake: Path, library: Path):
    """A new event at a destroyed one's address stands for nothing of the old one's."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        candidate.destroy_event(0xe1)
        candidate.wait_event({CALLER}, 0xe1)   # as if a new event got the address, unrecorded
        gate.kp_gate_open_callers_waits()
        said['side'] = ready({SIDE})
        gate.kp_gate_release()
        """,
    )
    assert run.said["side"] == [0]


def test_what_opens_for_a_wait_after_forward_returned_makes_the_hold_imprecise(
    fake: Path, library: Path
):
    """The caching allocator may synchronize or free under the harness's reads: whatever that
    lets go was not the candidate's wait."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        gate.kp_gate_forward_returned()
        candidate.free_memory(0x1000)
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["counts"]["imprecise"] == 1


def test_the_allocators_event_queries_are_answered_as_they_are(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        said['answer'] = allocator.allocator_query(0xe1)
        said['side'] = driver.fake_event_ready(0xe1)
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["answer"] == 600 and run.said["side"] == 0  # "not ready", nothing opened
    assert run.said["counts"]["imprecise"] == 0


def test_work_after_an_event_is_held_behind_a_new_wait_at_once(fake: Path, library: Path):
    """Work queued after the event by anything (cuBLAS's own launches, which the gate does not
    see) must not be let go with the event's segment."""
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.record(0xe1, {SIDE})
        gate.kp_gate_release()
        """,
    )
    kinds = [line.split()[0] for line in run.log]
    assert kinds == ["wait", "__cudaLaunchKernel", "event_record", "wait"]
    assert run.log[-1].endswith("value=2 flags=0")


def test_another_threads_per_thread_stream_is_a_failure_not_a_pass(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        import threading
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch_per_thread(0)
        thread = threading.Thread(target=candidate.launch_per_thread, args=(0,))
        thread.start()
        thread.join()
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["counts"]["failures"] == 1


def test_copies_wait_only_where_the_host_waits(fake: Path, library: Path):
    """Async: to pageable host memory the host waits (the stream is opened); from it, or
    between device buffers, the copy is queued work (held). Synchronous: with page-locked host
    memory the host waits too (the legacy stream is opened)."""
    pageable, pinned, device = 0x7F0000000000, 0x9000, 0x1000
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 5.0)
        candidate.launch({SIDE})
        candidate.copy({device}, {pageable}, 1, {OTHER})    # pageable to device: queued
        said['other'] = ready({OTHER})
        candidate.copy({pageable}, {device}, 2, {SIDE})     # device to pageable: waits
        said['side'] = ready({SIDE})
        candidate.launch_classic(0)
        candidate.copy_sync({pinned}, {device}, 2)           # synchronous, page-locked: waits
        said['legacy'] = ready(1)
        gate.kp_gate_release()
        """,
    )
    assert run.said == {"other": [0], "side": [1], "legacy": [1]}


def test_the_watchdog_opens_a_hold_that_lasts_too_long(fake: Path, library: Path):
    run = _run(
        fake,
        library,
        f"""
        gate.kp_gate_hold({CALLER}, 0.2)
        candidate.launch({SIDE})
        said['held'] = ready({SIDE})
        time.sleep(0.5)
        said['later'] = ready({SIDE})
        said['counts'] = counts()
        gate.kp_gate_release()
        """,
    )
    assert run.said["held"] == [0] and run.said["later"] == [1]  # opened by the watchdog
    assert run.said["counts"]["imprecise"] == 1


# --- what the worker makes of the holds (harness/workers/stream_hold.py) ----------------------------


def _gate(**tally) -> stream_gate.StreamGate:
    from types import SimpleNamespace

    names = (
        "kp_gate_init",
        "kp_gate_interposes",
        "kp_gate_error",
        "kp_gate_hold",
        "kp_gate_counts",
    )
    gate = stream_gate.StreamGate(SimpleNamespace(**{name: SimpleNamespace() for name in names}))
    for name, value in tally.items():
        setattr(gate, name, value)
    return gate


@pytest.mark.parametrize(
    "tally, cause",
    [
        ({"held_calls": 4, "imprecise": 4}, "let its held work go early"),
        ({"held_calls": 3, "timed_out": 3}, "never joined"),
        ({"held_calls": 2, "imprecise": 1, "failures": ["a failure"]}, "could not hold"),
    ],
)
def test_a_candidate_no_held_call_could_test_is_unverifiable(tally, cause):
    reason = _gate(conclusive=0, **tally).unverifiable()
    assert "could check stream order" in reason and cause in reason


@pytest.mark.parametrize(
    "tally",
    [
        {"held_calls": 4, "imprecise": 3, "conclusive": 1},  # one held call tested it
        {"held_calls": 0},  # nothing held (cpu, or the gate off)
        {"held_calls": 4, "imprecise": 4, "setup_failure": "no stream memory operations"},
    ],
)
def test_a_candidate_one_held_call_tested_is_not_failed_by_the_gate(tally):
    assert _gate(**tally).unverifiable() == ""


def test_the_summary_says_what_the_gate_did():
    summary = _gate(held_calls=5, conclusive=3, streams_held=2, timed_out=1, imprecise=1).summary()
    assert summary == (
        "; other streams held in 5 calls (3 conclusive, 2 stream(s) held, 1 timed out, "
        "1 let go early by the candidate's own calls)"
    )
    assert "is off here" in _gate(setup_failure="no driver").summary()


def test_a_passing_candidates_stream_check_says_what_the_gate_did():
    """The verdict's stream_ordered line carries the gate's summary (how many calls were held
    and how many of them tested the candidate): the reader of a review comment sees that the
    hold ran, not only that the check passed."""
    from harness.records import Check
    from harness.workers.candidate import _check_gate

    checks = [Check(name="stream_ordered", passed=True, detail="right on a busy stream")]
    _check_gate(checks, _gate(held_calls=3, conclusive=3, streams_held=1))
    assert checks[0].detail == (
        "right on a busy stream; other streams held in 3 calls (3 conclusive, 1 stream(s) held)"
    )


def test_a_candidate_no_held_call_tested_fails_stream_order_with_the_causes():
    from harness.records import Check, Status
    from harness.sandbox.jobs import CheckFailed
    from harness.workers.candidate import _check_gate

    checks = [Check(name="stream_ordered", passed=True, detail="right on a busy stream")]
    with pytest.raises(CheckFailed) as failed:
        _check_gate(checks, _gate(held_calls=2, imprecise=2))
    assert failed.value.status is Status.rejected and failed.value.check == "stream_ordered"
    assert "none of the 2 calls" in failed.value.reason and "let its held work go early" in (
        failed.value.reason
    )
    assert not checks  # the passed line gives way to the failed one
