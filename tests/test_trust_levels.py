"""Who decides how a pull request's code is isolated and where its builds go: never the pull
request. The sandbox is switched off only by the workflow's environment, never by
pyproject.toml; a fork is never run without it; each kind of run builds into a cache of its own.
"""

from __future__ import annotations

import pytest

from bot.run import RunOptions, cache_scope, project_eval_config
from bot.settings import Settings, settings_from_table
from harness.errors import UserError
from tests.fake_github import FakeGitHub
from tests.prflow import NUMBER, REPO, Job, Project


def test_pyproject_cannot_switch_the_sandbox_off():
    with pytest.raises(UserError) as raised:
        settings_from_table({"eval": {"sandbox": "off"}}, "pyproject.toml")
    assert "tool.kernelpilot.eval.sandbox" in raised.value.where


@pytest.mark.parametrize(
    "event, scope",
    [
        (None, "local"),
        ("pull_request", "pull-request"),
        ("pull_request_target", "pull-request"),
        ("schedule", "nightly"),
        ("workflow_dispatch", "dispatch"),
        ("issue_comment", "other-events"),
    ],
)
def test_each_kind_of_run_builds_into_a_cache_of_its_own(event, scope, tmp_path, monkeypatch):
    environ = {"GITHUB_EVENT_NAME": event} if event else {}
    assert cache_scope(environ) == scope
    monkeypatch.setenv("KERNELPILOT_CACHE", str(tmp_path))
    if event:
        monkeypatch.setenv("GITHUB_EVENT_NAME", event)
    else:
        monkeypatch.delenv("GITHUB_EVENT_NAME", raising=False)
    config = project_eval_config(RunOptions(device="cpu", settings=Settings()))
    assert config.cache_dir == tmp_path / "build" / scope


def test_a_pull_request_and_the_nightly_never_share_a_build_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELPILOT_CACHE", str(tmp_path))
    folders = set()
    for event in ("pull_request_target", "schedule", "workflow_dispatch"):
        monkeypatch.setenv("GITHUB_EVENT_NAME", event)
        folders.add(project_eval_config(RunOptions(device="cpu", settings=Settings())).cache_dir)
    assert len(folders) == 3


def test_the_sandbox_setting_is_the_environments_alone(monkeypatch):
    monkeypatch.setenv("KERNELPILOT_SANDBOX", "off")
    assert RunOptions(device="cpu", settings=Settings()).sandbox == "off"
    monkeypatch.setenv("KERNELPILOT_SANDBOX", "nonsense")
    with pytest.raises(UserError):
        RunOptions(device="cpu", settings=Settings())


def _measure(project: Project, fake_github: FakeGitHub, tmp_path, fork: bool):
    project.seed(fake_github, fork=fork)
    event = fake_github.pull_event(REPO, NUMBER)
    job = Job(tmp_path, fake_github, event, token=None)
    return job.run(
        "measure", "--out", str(tmp_path / "out"), "--llm", "offline", cwd=project.root,
        KERNELPILOT_SANDBOX="off", KERNELPILOT_EPHEMERAL_RUNNER="true",
    )  # fmt: skip


def test_a_fork_is_never_run_without_the_sandbox(fake_github, tmp_path):
    (tmp_path / "repo").mkdir()
    project = Project(tmp_path / "repo")
    done = _measure(project, fake_github, tmp_path / "job", fork=True)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "refusing to run a fork's pull request without the sandbox" in done.stderr
    assert not (tmp_path / "job" / "out" / "results.json").exists()
