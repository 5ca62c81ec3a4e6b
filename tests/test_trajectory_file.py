"""A trajectory is valid whenever it is saved (an interrupt before the first candidate was
timed leaves ``"root_ms": null``), and one that is not says which field is wrong."""

from __future__ import annotations

import json

import pytest

from agents.loop import new_trajectory
from agents.search.config import SearchConfig
from agents.trajectory import Trajectory
from harness.errors import UserError
from harness.problem.load import problem_from_target
from harness.records import Candidate
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


def test_a_trajectory_saved_with_flat_timings_still_loads_into_timings(tmp_path):
    """Saved by an optimize run before the times moved into ``Timings`` (and before verdicts
    recorded ``slower``): it loads, the same numbers in their new places, and saves anew."""
    path = FIXTURES / "trajectory_flat_timings.json"
    saved = json.loads(path.read_text())["tree"]["nodes"]["0.1"]["result"]
    result = Trajectory.load(path).tree.nodes["0.1"].result
    assert result is not None and "slower" not in saved["vs_eager"]
    timings = result.timings
    assert timings.eager_beside is not None and timings.compiled_beside is not None
    assert timings.eager_beside.median_ms == saved["eager"]["median_ms"]
    assert timings.eager_alone is not None and timings.eager_after is not None
    assert timings.compiled_beside.median_ms == saved["compiled"]["median_ms"]
    assert timings.candidate is not None
    assert timings.candidate.median_ms == saved["candidate"]["median_ms"]
    assert result.vs_eager is not None and result.vs_eager.speedup == saved["vs_eager"]["speedup"]
    assert result.vs_eager.slower is (result.vs_eager.speedup < 1 / 1.05)
    assert timings.eager is not None and timings.eager.median_ms == min(
        saved["eager"]["median_ms"], saved["eager_alone"]["median_ms"]
    )
    again = tmp_path / "again.json"
    Trajectory.load(path).save(again)
    assert Trajectory.load(again).model_dump_json() == Trajectory.load(path).model_dump_json()


def test_a_trajectory_saved_with_the_source_on_the_node_loads_its_candidate(tmp_path):
    """Saved before a node held its candidate: the node's bare ``source`` becomes the node's
    candidate (its id, parent, kind and plan), and it saves anew in the new layout."""
    path = FIXTURES / "trajectory_flat_timings.json"
    saved = json.loads(path.read_text())["tree"]["nodes"]
    nodes = Trajectory.load(path).tree.nodes
    assert nodes["0"].candidate is None  # the root's empty source: no candidate
    assert nodes["0.1"].candidate == Candidate(
        id="0.1", parent="0", origin="offline", source=saved["0.1"]["source"],
        note=saved["0.1"]["plan"],
    )  # fmt: skip
    again = tmp_path / "again.json"
    Trajectory.load(path).save(again)
    node = json.loads(again.read_text())["tree"]["nodes"]["0.1"]
    assert "source" not in node and node["candidate"]["source"] == saved["0.1"]["source"]


def test_a_node_holding_another_nodes_candidate_does_not_load(saved):
    data = json.loads(saved.read_text())
    stray = {"id": "0.7", "parent": "0", "origin": "improve", "source": "x", "note": ""}
    data["tree"]["nodes"]["0.1"] = {"id": "0.1", "parent": "0", "kind": "improve",
                                    "candidate": stray}  # fmt: skip
    saved.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        Trajectory.load(saved)
    assert "node 0.1 holds the candidate of node 0.7" in caught.value.what


def test_a_damaged_node_saved_with_its_source_names_the_field(tmp_path):
    data = json.loads((FIXTURES / "trajectory_flat_timings.json").read_text())
    del data["tree"]["nodes"]["0.1"]["kind"]
    path = tmp_path / "trajectory.json"
    path.write_text(json.dumps(data))
    with pytest.raises(UserError) as caught:
        Trajectory.load(path)
    assert "tree.nodes.0.1.kind: Field required" in caught.value.what


def test_calls_saved_before_cached_tokens_were_recorded_load_as_unknown(saved):
    """A trajectory written before calls kept their cached tokens: it loads, its calls' cached
    counts are unknown (not 0), and so is every sum over them; its other spend stays."""
    from agents.search.tree import LLMCall

    trajectory = Trajectory.load(saved)
    call = LLMCall(role="planner", temperature=0.8, text="plan", prompt_tokens=900,
                   completion_tokens=100, cost_usd=0.002)  # fmt: skip
    trajectory.tree.add(trajectory.tree.root, "improve", source="x = 1\n", calls=[call])
    data = json.loads(trajectory.model_dump_json())
    del data["tree"]["nodes"]["0.1"]["calls"][0]["cached_tokens"]
    saved.write_text(json.dumps(data))
    spend = Trajectory.load(saved).spend()
    [attempt] = spend.attempts
    assert (attempt.node_id, attempt.kind, attempt.outcome) == ("0.1", "improve", "not_evaluated")
    assert attempt.spend.cached_tokens is None and spend.total.cached_tokens is None
    assert (spend.total.prompt_tokens, spend.total.completion_tokens) == (900, 100)
    assert spend.total.cost_usd == 0.002 and spend.total.calls == 1
