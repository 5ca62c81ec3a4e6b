"""Reference outputs made again per candidate by the comparator worker (the default on cuda),
run here on cpu with the file transport: the same verdicts as outputs stored by the reference
worker, no reference output written, and a comparator that dies fails only its candidate."""

from __future__ import annotations

import base64
import os
import signal
from pathlib import Path

import pytest
import torch

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.problem.reference import reference_data
from harness.records import Candidate, Status
from harness.workers import handover
from tests.conftest import FIXTURES, fast_config

PROBLEM = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
HONEST = Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
WRONG = Candidate(source=(FIXTURES / "isolation_wrong.py").read_text())


@pytest.fixture(scope="module")
def evaluators():
    stored = Evaluator(fast_config(reference_outputs="stored"), seed=3)
    recomputed = Evaluator(fast_config(reference_outputs="recomputed"), seed=3)
    yield stored, recomputed
    recomputed.close()


def test_recomputed_reference_outputs_give_the_same_verdicts(evaluators):
    stored, recomputed = evaluators
    for candidate in (HONEST, WRONG):
        a, b = stored.evaluate(PROBLEM, candidate), recomputed.evaluate(PROBLEM, candidate)
        assert a.status == b.status
        assert [c.name for c in a.checks if c.name != "network_isolated"] == [
            c.name for c in b.checks if c.name != "network_isolated"
        ]
        if a.status is Status.ok:
            assert a.max_abs_error == pytest.approx(b.max_abs_error, abs=1e-6)
        else:
            assert a.reason == b.reason  # the same case, output and element count
    assert recomputed.evaluate(PROBLEM, WRONG).status is Status.incorrect


def test_a_dead_comparator_fails_its_candidate_and_is_started_again(evaluators):
    _, recomputed = evaluators
    assert recomputed.evaluate(PROBLEM, HONEST).status is Status.ok
    (comparator,) = _running(recomputed)
    _kill(comparator)
    # Killed before the candidate's first case: a fresh comparator answers it.
    assert recomputed.evaluate(PROBLEM, HONEST).status is Status.ok
    assert _running(recomputed) != [comparator]


@pytest.fixture
def one_candidate(tmp_path: Path):
    """The reference data, the comparator, and one candidate's receiver (its files in tmp)."""
    evaluator = Evaluator(fast_config(reference_outputs="recomputed"), seed=5, work_dir=tmp_path)
    data = evaluator.reference(PROBLEM)
    (comparator,) = _running(evaluator)
    yield data, comparator, comparator.begin().at(tmp_path)
    evaluator.close()


def _running(evaluator: Evaluator) -> list:
    """The evaluator's comparator workers, of every problem and GPU."""
    return evaluator.comparators.running()


def _kill(comparator) -> None:
    """The comparator dies: its process and the sandbox's processes around it, at once (killing
    only bubblewrap's outer process ends the sandbox too, but a moment later)."""
    for pid in reversed(_tree(comparator.process.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    comparator.process.wait()


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants, parents first (from /proc's children lists)."""
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += _tree(int(child))
    return found


def test_a_comparator_that_stops_answering_never_passes_a_candidate(one_candidate):
    data, comparator, receiver = one_candidate
    _kill(comparator)
    assert receiver({"case": 0}) is False
    result = receiver.result()
    assert result is not None and result.failed and "comparator" in result.failed
    assert result.stopped  # a runtime error of the evaluation, not a wrong kernel
    assert data.recomputed and not data.files


def test_the_reference_worker_stores_no_outputs_when_they_are_made_again(tmp_path: Path):
    config = fast_config(reference_outputs="recomputed")
    data = reference_data(PROBLEM, config, seed=1, work_dir=tmp_path)
    assert data.recomputed and not data.files and len(data.cases) >= 6
    assert "store" not in data.report.phase_seconds
    assert not list(tmp_path.rglob("reference-*.pt"))


def test_auto_recomputes_on_cuda_only():
    config = fast_config()
    assert config.recomputes("cuda") and not config.recomputes("cpu")
    assert fast_config(reference_outputs="stored").recomputes("cuda") is False


def _handle(**changes) -> dict:
    handle = {
        "dtype": "float32",
        "shape": [4],
        "stride": [1],
        "offset": 0,
        "device": 0,
        "handle": base64.b64encode(b"h").decode(),
        "size_bytes": 16,
        "offset_bytes": 0,
        "counter_handle": base64.b64encode(b"c").decode(),
        "counter_offset": 0,
        "event_handle": base64.b64encode(b"e").decode(),
        "event_sync_required": True,
    }
    handle.update(changes)
    return handle


@pytest.mark.parametrize(
    "body",
    [
        {"case": 0},  # no handles
        {"case": 0, "ipc": "x"},
        {"case": 0, "ipc": ["x"]},
        {"case": 0, "ipc": [_handle(dtype="object")]},
        {"case": 0, "ipc": [_handle(shape=[4, 4])]},  # strides of another rank
        {"case": 0, "ipc": [_handle(stride=[-1])]},
        {"case": 0, "ipc": [_handle(size_bytes="16")]},
        {"case": 0, "ipc": [_handle(handle="not base64!")]},
        {"case": 0, "ipc": [_handle(shape=list(range(1, 20)), stride=[1] * 19)]},
    ],
)
def test_an_untrusted_ipc_announcement_is_refused_before_any_memory_is_mapped(tmp_path, body):
    with pytest.raises(handover.HandoverError):
        handover.receive(body, tmp_path, 0, "ipc")


def test_a_file_announcement_reads_plain_tensors_only(tmp_path: Path):
    torch.save({"not": "a list"}, tmp_path / "outputs-0.pt")
    with pytest.raises(handover.HandoverError, match="no list of tensors"):
        handover.receive({"case": 0}, tmp_path, 0, "file")
    assert not (tmp_path / "outputs-0.pt").exists()
    with pytest.raises(handover.HandoverError, match="did not write"):
        handover.receive({"case": 0, "ipc": []}, tmp_path, 0, "file")


def test_a_comparator_that_dies_before_the_end_fails_a_candidate_it_answered(
    one_candidate, tmp_path: Path
):
    from harness.problem.cases import build_reference, case_inputs, case_module

    data, comparator, receiver = one_candidate
    spec = data.cases[0]
    module = case_module(build_reference(PROBLEM, data.seeds[0]), spec)
    with torch.no_grad():
        right = [module(*case_inputs(PROBLEM, spec, data.report.strengthened))]
    assert receiver(handover.send(right, tmp_path, 0, "file", [])) is True
    _kill(comparator)
    result = receiver.result()
    assert result is not None and result.failed and "did not finish" in result.failed


UNSEEDED = """
import random

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.full((4096,), random.random()))  # not seeded by torch
        self.scale = scale

    def forward(self, x):
        return torch.tanh(x) * self.scale + x + self.bias


def get_inputs():
    return [torch.randn(64, 4096)]


def get_init_inputs():
    return [3.0]
"""


@pytest.mark.parametrize("mode", ["stored", "recomputed"])
def test_a_constructor_that_is_not_seeded_by_torch_is_the_users_error(tmp_path: Path, mode):
    from harness.errors import UserError

    source = tmp_path / "unseeded.py"
    source.write_text(UNSEEDED)
    problem = problem_from_target(str(source), "cpu", "float32")
    evaluator = Evaluator(fast_config(reference_outputs=mode), seed=1, work_dir=tmp_path / "w")
    try:
        with pytest.raises(UserError, match="other parameters in another worker") as caught:
            evaluator.evaluate(problem, HONEST)
        assert "__init__" in caught.value.where and "random" in caught.value.fix
    finally:
        evaluator.close()


def test_releasing_a_problem_stops_its_comparator(tmp_path: Path):
    evaluator = Evaluator(fast_config(reference_outputs="recomputed"), seed=2, work_dir=tmp_path)
    try:
        evaluator.reference(PROBLEM)
        (comparator,) = _running(evaluator)
        evaluator.release(PROBLEM)
        assert comparator.process.poll() is not None and not _running(evaluator)
        assert evaluator.reference(PROBLEM).recomputed  # asked again: a fresh one
        assert [c.alive() for c in _running(evaluator)] == [True]
    finally:
        evaluator.close()
