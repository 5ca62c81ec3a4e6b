"""A run over several GPU runners (``bot.pr.shards``): ``plan`` splits the changed modules into
shards, and ``merge`` joins the shards' results (each untrusted, as one job's are) into one
results folder for publish, refusing results of other runs and two shards answering for one
module, and saying a planned shard whose results are missing. The whole workflow under act:
tests/test_workflows.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli import main
from bot.detect.changes import ChangedModule
from bot.event import parse_event
from bot.pr.results import PullResults, TargetSource
from bot.pr.shards import Plan, load_shards, merge, plan, plan_order
from harness.errors import UserError
from tests.fake_github import FakeGitHub
from tests.prflow import NUMBER, REPO, Project
from tests.test_publish import TARGET, comment, honest, run_publish

OTHER = "models/act.py:Gate"


@pytest.fixture
def project(tmp_path) -> Project:
    (tmp_path / "checkout").mkdir()
    return Project(tmp_path / "checkout")


def test_a_plan_deals_the_modules_over_the_shards_each_once():
    names = [f"m.py:C{i}" for i in range(5)]
    planned = plan(names, 2)
    # in turn: the first ones (the configured targets) spread over every runner
    assert [shard.names() for shard in planned.include] == [names[0::2], names[1::2]]
    assert sorted(plan_order(planned), key=plan_order(planned).get) == names
    assert [shard.shard for shard in plan(names, 9).include] == [1, 2, 3, 4, 5]  # one module each
    [nothing] = plan([], 4).include  # a matrix cannot be empty: one shard of the whole event
    assert nothing.only == ""
    # a class defined twice in a file is detected twice: one shard measures it
    assert [s.names() for s in plan(["a.py:B", "a.py:B", "a.py:C"], 3).include] == [
        ["a.py:B"], ["a.py:C"]]  # fmt: skip
    with pytest.raises(UserError, match="has white space"):
        plan(["my models/a.py:Net"], 2)
    with pytest.raises(UserError, match="more than an Actions output"):
        plan([f"models/very/deep/package/module_{i}.py:Block" for i in range(2000)], 4)


def shard_of(project: Project, target: str, shard: list[str]) -> PullResults:
    """What one measure job writes for pull request 7, ``--only`` its ``shard``."""
    results = honest(project)
    path, _, name = target.partition(":")
    results.report.targets[0].target = target
    assert results.changes is not None
    module = results.changes.modules[0]
    results.changes.modules = [module.model_copy(update={"class_name": name, "target": target})]
    results.sources = {target: TargetSource(module_path=path, class_name=name,
                                            inputs_fn="make_inputs", init_args=[1024])}  # fmt: skip
    results.shard = shard
    return results


def write(folder: Path, shards: dict[str, PullResults]) -> Path:
    for name, results in shards.items():
        results.save(folder / name)
    return folder


@pytest.fixture
def event(project: Project, fake_github: FakeGitHub):
    project.seed(fake_github)
    return parse_event("pull_request_target", fake_github.pull_event(REPO, NUMBER), REPO)


def test_the_shards_results_join_into_one_run(project, event, tmp_path):
    folder = write(tmp_path / "shards", {
        "kernelpilot-results-10": shard_of(project, OTHER, [OTHER]),
        "kernelpilot-results-9": shard_of(project, TARGET, [TARGET]),
    })  # fmt: skip
    merged = merge(*load(folder, event, plan([TARGET, OTHER], 2)))
    assert [row.target for row in merged.report.targets] == [TARGET, OTHER]  # the plan's order
    assert set(merged.sources) == {TARGET, OTHER} and merged.shard is None
    assert merged.changes is not None
    assert [m.class_name for m in merged.changes.modules] == ["Activation", "Gate"]
    assert merged.changes.notes == []


def load(folder: Path, event, planned: Plan | None = None):
    """merge's arguments as the command gives them."""
    shards, refused = load_shards(folder, event)
    return shards, planned, refused


def test_a_planned_shard_without_results_is_said_with_its_modules(project, event, tmp_path):
    folder = write(
        tmp_path / "shards", {"kernelpilot-results-1": shard_of(project, TARGET, [TARGET])}
    )
    merged = merge(*load(folder, event, plan([TARGET, OTHER], 2)))
    assert [row.target for row in merged.report.targets] == [TARGET]
    assert merged.changes is not None
    [note] = merged.changes.notes
    assert "Shard 2 of 2 left no results" in note and OTHER in note


@pytest.mark.parametrize(
    ("second", "refusal"),
    [
        (lambda p: shard_of(p, TARGET, [OTHER]), "of two shards"),  # one module, twice
        (lambda p: _row_of(shard_of(p, OTHER, [OTHER]), TARGET), "measured by shards 1 and 2"),
        (lambda p: _with_source_of(shard_of(p, OTHER, [OTHER]), TARGET), "gives the source of"),
        (lambda p: _other_judge(shard_of(p, OTHER, [OTHER])), "judged_by differs"),
    ],
)
def test_shards_that_do_not_belong_to_one_run_are_refused(project, event, tmp_path, second,
                                                          refusal):  # fmt: skip
    folder = write(tmp_path / "shards", {
        "1": shard_of(project, TARGET, [TARGET]),
        "2": second(project),
    })  # fmt: skip
    with pytest.raises(UserError, match=refusal):
        merge(*load(folder, event))


def _with_source_of(results: PullResults, target: str) -> PullResults:
    """A shard that also gives the source of another shard's module (the follow-up is built
    from sources: a forged one would put its own constructor call into the follow-up)."""
    results.sources[target] = TargetSource(module_path="models/act.py", class_name="Activation",
                                           init_fn="evil", inputs_fn="make_inputs")  # fmt: skip
    return results


def _row_of(results: PullResults, target: str) -> PullResults:
    """A shard whose row answers for another shard's module (its changes name its own)."""
    results.report.targets[0].target = target
    results.sources = {}
    return results


def _other_judge(results: PullResults) -> PullResults:
    results.judged_by = results.judged_by.model_copy(update={"pyproject": "other.toml"})
    return results


def test_a_shard_of_another_commit_is_refused_and_the_others_still_published(
    project, event, tmp_path
):
    """Each shard is checked as one job's results are: a stale or forged one is left out and
    said; the shards that pass are published."""
    stale = shard_of(project, OTHER, [OTHER]).model_copy(update={"commit": "f" * 40})
    folder = write(tmp_path / "shards", {
        "kernelpilot-results-1": shard_of(project, TARGET, [TARGET]),
        "kernelpilot-results-2": stale,
    })  # fmt: skip
    merged = merge(*load(folder, event, plan([TARGET, OTHER], 2)))
    assert [row.target for row in merged.report.targets] == [TARGET]
    assert merged.changes is not None
    refusal, missing = merged.changes.notes
    assert "kernelpilot-results-2 were refused: results are for commit" in refusal
    assert "Shard 2 of 2 left no results" in missing and OTHER in missing
    with pytest.raises(UserError, match="no measure job's results.json to publish"):
        load_shards(tmp_path / "nothing-downloaded", event)


def test_merged_results_are_published_as_one_comment(project, fake_github, event, tmp_path):
    folder = write(tmp_path / "shards", {
        "kernelpilot-results-1": shard_of(project, TARGET, [TARGET]),
        "kernelpilot-results-2": shard_of(project, OTHER, [OTHER]),
    })  # fmt: skip
    merged = merge(*load(folder, event))
    run_publish(fake_github, tmp_path, merged, open_pr=False)
    body = comment(fake_github)
    assert f"` {TARGET} `" in body and f"` {OTHER} `" in body


def test_the_plan_and_merge_commands_as_the_jobs_run_them(
    project, fake_github, tmp_path, monkeypatch
):
    """plan reads the checkout's changes (the prflow project: one changed module) and puts out
    the matrix; merge writes the joined results.json where publish reads it."""
    project.seed(fake_github)
    payload = tmp_path / "event.json"
    payload.write_text(json.dumps(fake_github.pull_event(REPO, NUMBER)))
    output = tmp_path / "output.txt"
    for name, value in {"GITHUB_EVENT_NAME": "pull_request_target", "GITHUB_EVENT_PATH": payload,
                        "GITHUB_REPOSITORY": REPO, "GITHUB_OUTPUT": output}.items():  # fmt: skip
        monkeypatch.setenv(name, str(value))
    planned = CliRunner().invoke(main, ["github", "plan", "--repo", str(project.root),
                                        "--shards", "3"])  # fmt: skip
    assert planned.exit_code == 0, planned.output
    matrix = output.read_text().split("\n")[1]
    assert Plan.model_validate_json(matrix).include[0].names() == [TARGET]
    folder = write(
        tmp_path / "shards", {"kernelpilot-results-1": shard_of(project, TARGET, [TARGET])}
    )
    merged = CliRunner().invoke(main, ["github", "merge", "--shards", str(folder), "--out",
                                       str(tmp_path / "joined"), "--plan", matrix])  # fmt: skip
    assert merged.exit_code == 0, merged.output
    joined = PullResults.model_validate_json((tmp_path / "joined" / "results.json").read_text())
    assert [row.target for row in joined.report.targets] == [TARGET]


def test_a_module_of_another_shard_is_not_measured_here(tmp_path):
    """measure --only keeps the shard's modules of what detection found, and says a name it
    did not find."""
    from bot.detect.changes import ChangeReport
    from bot.pr.shards import keep_shard

    modules = [ChangedModule(path="m.py", class_name=name, class_line=1, lines=[1],
                             reason="class body changed") for name in ("A", "B")]  # fmt: skip
    changes = ChangeReport(base="b", head="h", base_sha="a" * 40, head_sha="b" * 40,
                           merge_base="a" * 40, max_targets=20, modules=modules)  # fmt: skip
    keep_shard(changes, ["m.py:B", "m.py:Gone"])
    assert [m.class_name for m in changes.modules] == ["B"]
    assert "m.py:Gone" in changes.notes[0]


def test_a_manual_runs_shard_with_none_of_its_targets_measures_nothing(tmp_path):
    """A manual run's shard whose names are none of the run's targets must not fall back to
    "every configured target" (what an empty target list means): those are other shards'."""
    from bot.event import ActionsEnv, Dispatch, Event
    from bot.pr.flow import measure
    from bot.run import RunOptions
    from bot.settings import load_settings
    from tests.gitrepo import commit, init

    repo = tmp_path / "repo"
    repo.mkdir()
    init(repo)
    commit(repo, {"m.py": "x = 1\n"}, "base")
    event = Event(name="workflow_dispatch", repository=REPO,
                  dispatch=Dispatch(targets=["m.py:A"]))  # fmt: skip
    options = RunOptions(device="cpu", settings=load_settings(repo), out_dir=tmp_path / "out")
    results = measure(event, ActionsEnv(repository=REPO), repo, options, lambda m: None,
                      only=["m.py:B"])  # fmt: skip
    assert results.report.targets == [] and "m.py:B" in results.note
