"""A trajectory is valid whenever it is saved (an interrupt before the first candidate was
timed leaves ``"root_ms": null``), and one that is not says which field is wrong."""

from __future__ import annotations

import json

import pytest

from agents.loop import SearchConfig, new_trajectory
from agents.trajectory import Trajectory
from harness.errors import UserError
from harness.problem.load import problem_from_target
from tests.conftest import FIXTURES


@pytest.fixture
def saved(tmp_path):
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    path = tmp_path / "trajectory-scale_problem.json"
    new_trajectory(problem, "fake-model", SearchConfig(), seed=1).save(path)
    return path


def test_a_trajectory_saved_before_anything_was_timed_resumes(saved):
    assert json.loads(saved.read_text())["tree"]["root_ms"] is None  # JSON has no infinity
    trajectory = Trajectory.load(saved)
    assert trajectory.tree.root_ms == float("inf") and trajectory.target == "scale_problem"


def test_a_damaged_trajectory_names_the_field(saved):
    data = json.loads(saved.read_text())
    data["budget"]["attempts"] = "many"
    saved.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        Trajectory.load(saved)
    assert "budget.attempts: Input should be a valid integer" in caught.value.what
    assert "'many'" in caught.value.what


def test_half_a_trajectory_says_it_is_not_json(saved):
    saved.write_text(saved.read_text()[:100])
    with pytest.raises(UserError) as caught:
        Trajectory.load(saved)
    assert "it is not JSON" in caught.value.what
