"""Blame that is right: what fails is said to be the fault of whoever's code it is.

kernelpilot's own bugs are said to be kernelpilot's, not the candidate's; problems the harness
cannot verify (complex dtypes, inputs the forward changes in place, empty inputs, inputs past
the memory limit) are the user's, said as what they are, before any candidate runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest
import torch

from harness.errors import KERNELPILOT_BUG, HarnessError, UserError
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox.blame import raised_by_kernelpilot
from harness.workers import guards
from tests.conftest import FIXTURES, fast_config, write_module

BAD = FIXTURES / "bad"
PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
HONEST = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
HARNESS_BUG_HOOK = Path(__file__).resolve().parent / "hooks" / "harness_bug"


def _refused(problem_file: str, monkeypatch, **config) -> UserError:
    """The UserError evaluating the honest candidate on ``problem_file`` raises, checked to
    come before any candidate's worker started."""
    evaluator = Evaluator(fast_config(**config), seed=1)
    started: list[str] = []
    monkeypatch.setattr(evaluator.workers, "run", lambda *args: started.append(args[2]))
    problem = problem_from_target(str(BAD / problem_file), "cpu", "float32")
    with pytest.raises(UserError) as refused:
        evaluator.evaluate(problem, HONEST)
    assert started == []
    return refused.value


def test_complex_inputs_are_refused_before_any_candidate_runs(monkeypatch):
    """Complex inputs crashed the candidate's worker in the harness's guard fill
    (``torch.iinfo``), reported as the candidate's runtime_error."""
    err = _refused("complex_inputs.py", monkeypatch)
    assert "input 0 is complex64[64, 256]" in err.what
    assert "float32" in err.what and "bool" in err.what  # what it does verify
    assert "get_inputs()" in err.where and "torch.view_as_real" in err.fix


def test_a_forward_that_changes_its_inputs_in_place_is_said_so(monkeypatch):
    """It was blamed on the input factory's randomness (a second draw differed from the
    inputs as the forward had left them)."""
    err = _refused("inplace_forward.py", monkeypatch)
    assert "Model.forward changes its inputs in place (input 0)" in err.what
    assert "input factory" not in err.what
    assert err.where.endswith("inplace_forward.py:Model.forward")
    assert "x.clone()" in err.fix


def test_zero_size_inputs_are_said_to_leave_nothing_to_check(monkeypatch):
    """The audit said a null answer passes: 'make inputs signed and varied'."""
    err = _refused("zero_size_inputs.py", monkeypatch)
    assert "zero-size input (input 0: float32[0, 256])" in err.what
    assert "nothing to compute or check" in err.what
    assert "non-empty shapes" in err.fix and "signed" not in err.fix


def test_an_input_factory_past_the_memory_limit_is_said_to_run_out_of_memory(monkeypatch):
    """Asking for 64 GiB under a 4 GiB limit was 'make get_inputs() run without arguments'."""
    err = _refused("huge_inputs.py", monkeypatch, memory_limit_gb=4)
    assert "get_inputs() ran out of memory allocating 64.0 GiB" in err.what
    assert "the worker's memory limit is 4 GiB (eval.memory_limit_gb)" in err.what
    assert "without arguments" not in err.fix and "smaller inputs" in err.fix


TORCH_CPU_OOM = (
    "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: "
    "you tried to allocate 68719476736 bytes. Error code 12 (Cannot allocate memory)"
)
ALLOCATING = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        raise MemoryError()


def get_inputs():
    raise RuntimeError(TORCH_CPU_OOM)


def get_init_inputs():
    return []
"""


def test_running_out_of_memory_is_not_a_signature_problem(tmp_path):
    """Each of the user's functions the harness calls: what ran out, not 'make it run without
    arguments' (here in this process: no address-space limit, the machine's memory said)."""
    from harness.problem.cases import build_reference, make_inputs

    source = ALLOCATING.replace("TORCH_CPU_OOM", repr(TORCH_CPU_OOM))
    problem = problem_from_target(str(write_module(tmp_path, "allocating", source)), "cpu", None)
    with pytest.raises(UserError) as inputs:
        make_inputs(problem, 1)
    assert inputs.value.what.startswith("get_inputs() ran out of memory allocating 64.0 GiB; ")
    assert "smaller inputs" in inputs.value.fix
    with pytest.raises(UserError) as constructing:
        build_reference(problem, 1)
    assert constructing.value.what.startswith("constructing Model(*[], **{}) ran out of memory;")
    assert "smaller sizes" in constructing.value.fix


def _harness_bug(monkeypatch, where: str) -> None:
    monkeypatch.setenv("KP_TEST_HARNESS_BUG", where)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(HARNESS_BUG_HOOK), os.environ.get("PYTHONPATH", "")])
    )


def test_a_harness_bug_in_the_checks_worker_is_kernelpilots_not_the_candidates(monkeypatch):
    """A TypeError raised in the harness's own frame (staging a case's inputs) was the
    candidate's runtime_error, 'the worker died (exit code 1)', with a false network line."""
    _harness_bug(monkeypatch, "checks")
    result = Evaluator(fast_config(), seed=1).evaluate(PROBLEM, HONEST)
    assert result.status is Status.harness_error, result.reason
    assert result.reason.startswith(f"{KERNELPILOT_BUG}: TypeError")
    assert "Traceback" in result.log and "harness/workers/guards.py" in result.log
    # The worker died before it checked the network: no line for a check that did not run.
    assert "network_isolated" not in [check.name for check in result.checks]


def test_a_harness_bug_in_the_reference_worker_raises_as_kernelpilots(monkeypatch):
    """It was a UserError: 'the reference run failed ... run the module on its inputs'."""
    _harness_bug(monkeypatch, "reference")
    with pytest.raises(HarnessError) as raised:
        Evaluator(fast_config(), seed=1).reference(PROBLEM)
    assert not isinstance(raised.value, UserError)
    text = str(raised.value)
    assert text.startswith(f"{KERNELPILOT_BUG}: TypeError")
    assert "harness/workers/reference.py" in text  # the worker's traceback


CANDIDATE = """
import torch


def forward(x):
    return torch.split(x, [1, 1])  # raises inside torch's own Python code


def forward_raising(x):
    raise ValueError("the candidate's own")
"""


@pytest.fixture
def candidate_module(tmp_path):
    import importlib.util

    path = write_module(tmp_path, "candidate", CANDIDATE)
    spec = importlib.util.spec_from_file_location("kp_blame_candidate", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, path


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as err:
        return err
    raise AssertionError("nothing raised")


def test_torch_raising_in_the_harness_own_call_is_kernelpilots():
    err = _raised(lambda: guards.guard_fill(torch.ones(2, dtype=torch.complex64)))
    assert raised_by_kernelpilot(err, [])


def test_a_device_fault_reported_in_the_harness_frames_is_not_kernelpilots(monkeypatch):
    """A candidate's illegal address surfaces at the next call that synchronizes, often in the
    harness's own frame (found on an H200: the illegal-address test read harness_error). The
    Mock's frames are the standard library's, so the harness's frame is the innermost one."""
    fault = RuntimeError(
        "CUDA error: an illegal memory access was encountered\nCUDA kernel errors might be "
        "asynchronously reported at some other API call"
    )
    monkeypatch.setattr(torch, "iinfo", mock.Mock(side_effect=fault))
    err = _raised(lambda: guards.guard_fill(torch.ones(2, dtype=torch.int32)))
    assert raised_by_kernelpilot(err, []) is False
    monkeypatch.setattr(torch, "iinfo", mock.Mock(side_effect=RuntimeError("a harness bug")))
    err = _raised(lambda: guards.guard_fill(torch.ones(2, dtype=torch.int32)))
    assert raised_by_kernelpilot(err, [])  # any other error in the harness's frames stays ours


@pytest.mark.parametrize("name", ["forward", "forward_raising"])
def test_a_candidate_raising_under_the_harness_stays_the_candidates(candidate_module, name):
    """Called by harness code, raising in its own frame or inside a torch call (whose frames
    are torch's): the innermost frame that is not a library's is the candidate's."""
    module, path = candidate_module
    x = torch.ones(3)
    err = _raised(lambda: guards.at_return([x], before_read=lambda: getattr(module, name)(x)))
    assert raised_by_kernelpilot(err, [path]) is False
    assert raised_by_kernelpilot(err, []) is False  # a file of no library, wherever it is
