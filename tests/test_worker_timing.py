"""Eager timed alone, beside the candidate and after it are measured under the same work.

The disturbance check (and the speedup's baseline) compares them: if eager alone ran in a
tighter loop than eager beside the candidate, every candidate would look like it slows eager
down (on an H100 a small problem's eager ran 1.5x slower between checked calls than back to
back), and speedups would be taken against a baseline no candidate call was timed under.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.config import EvalConfig
from harness.problem.cases import build_reference
from harness.problem.load import problem_from_target
from harness.sandbox.jobs import CheckFailed, WorkerJob
from harness.workers import timing as worker_timing
from harness.workers.timed_checks import TimedChecks
from harness.workers.timers import Timer

FIXTURES = Path(__file__).parent / "fixtures"


def _job(tmp_path: Path, compile_baseline: bool) -> WorkerJob:
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    config = EvalConfig(
        compile_baseline=compile_baseline, min_reps=3, max_reps=3, warmup=1, time_budget_s=0.001
    )
    return WorkerJob(
        mode="evaluate", problem=problem, config=config, cache_dir=tmp_path, seeds=[1, 2, 3, 4, 5]
    )


def _phase_calls(monkeypatch, run) -> dict[str, list[str]]:
    """What each timing loop did, by window, in order: each timed call by its slot, each
    check by name."""
    windows: dict[str, list[str]] = {}
    calls: list[str] = []
    slots: dict[int, str] = {}
    real_loop, real_timer = worker_timing.time_loop, Timer.__call__

    def loop(job, implementations, checks):
        nonlocal calls
        calls = windows.setdefault(checks.window, [])
        slots.update({id(fn): name for name, fn in implementations.items()})
        return real_loop(job, implementations, checks)

    def timed(timer, fn, inputs):
        calls.append(f"time:{slots[id(fn)]}")
        return real_timer(timer, fn, inputs)

    def spy(name):
        real = getattr(TimedChecks, name)

        def check(checks, *args):
            calls.append(f"check:{name}")
            return real(checks, *args)

        return check

    monkeypatch.setattr(worker_timing, "time_loop", loop)
    monkeypatch.setattr(Timer, "__call__", timed)
    for name in ("before", "after_candidate", "against_eager"):
        monkeypatch.setattr(TimedChecks, name, spy(name))
    run()
    monkeypatch.undo()
    return windows


@pytest.mark.parametrize("compile_baseline", [False, True])
def test_eager_alone_after_and_beside_the_candidate_run_the_same_calls_and_checks(
    tmp_path, monkeypatch, compile_baseline
):
    # Inductor's cache of this process's own: its graph cache is keyed without the CPU's
    # vector ISA, and this process's ISA probe (a compile and a child Python loading it, once
    # per process) once failed late in CI's suite: the graph another process had generated
    # with AVX-512 code was then built without AVX-512 flags ("'at::vec' has not been
    # declared"). Workers compile in their own sandboxes' caches.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    job = _job(tmp_path, compile_baseline)
    state = build_reference(job.problem, 0).state_dict()
    candidate = build_reference(job.problem, 0)  # an honest "candidate": the reference itself
    compiled = worker_timing.make_compiled(job, state)
    assert not isinstance(compiled, str), compiled  # the whole compile error, if any
    assert (compiled is None) is not compile_baseline
    windows = _phase_calls(
        monkeypatch, lambda: worker_timing.time_stand_ins(job, state, "alone", compiled)
    )
    alone = worker_timing.time_stand_ins(job, state, "alone", compiled)
    windows |= _phase_calls(
        monkeypatch,
        lambda: worker_timing.time_interleaved(job, candidate, state, [], alone, compiled),
    )
    assert list(windows) == ["settle", "alone", "beside", "after"]
    alone = windows["alone"]
    assert all(windows[name] == alone for name in ("settle", "beside", "after"))
    slots = {"time:candidate", "time:eager"} | ({"time:compiled"} if compile_baseline else set())
    assert {call for call in alone if call.startswith("time:")} == slots
    assert "check:after_candidate" in alone and "check:against_eager" in alone


def test_a_stand_in_is_checked_but_never_judged(tmp_path):
    """The reference in the candidate's slot does the checks' work; what they find is no verdict."""
    job = _job(tmp_path, compile_baseline=False)
    inputs = [torch.randn(4, 8)]
    for window in ("alone", "after", "beside"):
        checks = TimedChecks(job, window)
        checks.before(inputs)
        inputs[0].add_(1.0)  # the call in the candidate's slot modified its input
        if window != "beside":
            checks.after_candidate(0, inputs, inputs[0])  # an alias too: nothing raised
        else:
            with pytest.raises(CheckFailed) as failed:
                checks.after_candidate(0, inputs, torch.zeros(4, 8))
            assert failed.value.check == "inputs_unchanged"


def test_a_baseline_that_does_not_compile_is_shown_and_a_copy_takes_its_place(
    tmp_path, monkeypatch
):
    """torch.compile failing on the user's module is the baseline's failure: the candidate is
    timed against eager, the error is reported, and eager alone still has the compiled slot's
    host work beside it (a reference copy)."""

    def fails(module):
        def call(*inputs):
            raise RuntimeError("no inductor here")

        return call

    monkeypatch.setattr(worker_timing.torch, "compile", fails)
    job = _job(tmp_path, compile_baseline=True)
    state = build_reference(job.problem, 0).state_dict()
    compiled = worker_timing.make_compiled(job, state)
    assert isinstance(compiled, str) and "no inductor here" in compiled
    alone = worker_timing.time_stand_ins(job, state, "alone", compiled)
    assert set(alone.stats) == {"eager", "compiled"}  # the copy in the compiled slot, timed
    candidate = build_reference(job.problem, 0)
    report = worker_timing.time_interleaved(job, candidate, state, [], alone, compiled)
    assert report.timings.compile_baseline_error == compiled
    assert report.timings.compiled_beside is None and report.timings.compiled_alone is None
    assert report.timings.eager_beside is not None and report.timings.eager_after is not None


def test_a_long_compile_error_keeps_what_the_compiler_said(tmp_path, monkeypatch):
    """Inductor's C++ error starts with the compiler's command, often thousands of characters
    long, and ends with what the compiler said: the report keeps the end."""
    command = "g++ main.cpp " + " ".join(f"-I/include/{n}" for n in range(400))

    def fails(module):
        def call(*inputs):
            raise RuntimeError(f"C++ compile error\nCommand:\n{command}\nOutput:\nfatal: no x.h")

        return call

    monkeypatch.setattr(worker_timing.torch, "compile", fails)
    job = _job(tmp_path, compile_baseline=True)
    compiled = worker_timing.make_compiled(job, build_reference(job.problem, 0).state_dict())
    assert isinstance(compiled, str)
    assert compiled.startswith("RuntimeError: C++ compile error") and "fatal: no x.h" in compiled
    assert len(compiled) < 2100
