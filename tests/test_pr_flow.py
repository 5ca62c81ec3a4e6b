"""The pull-request flow end to end on cpu: a real git repository, the real CLI in subprocesses
(``kernelpilot github gate|measure|publish``, as the workflow's jobs run it), the real PyGithub
client against the fake GitHub server, real compilation and timing.

The measuring job runs once per module (it builds and times a kernel, about a minute); each
test seeds its own fake server with the same commits, so the results apply to every one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.pr.comment import MARKER
from bot.pr.dropin import runtime_module
from tests.fake_github import FakeGitHub
from tests.fake_openai import reply
from tests.gitrepo import commit, git
from tests.prflow import BOT, CHANGED, CLASS_LINE, MODULE, NUMBER, PROJECT, REPO, Job, Project

VERIFIED = "models/act_verified_kernelpilot.py"  # the kernel as verified; the drop-in imports it
RUNTIME = f"models/{runtime_module()[0]}.py"  # what the drop-ins share; the drop-in imports it


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return Project(tmp_path_factory.mktemp("checkout"))


@pytest.fixture(scope="module")
def measured(project: Project, tmp_path_factory) -> Path:
    """The measuring job's results folder for pull request 7 at the head (offline proposer)."""
    tmp = tmp_path_factory.mktemp("measure")
    with FakeGitHub() as fake:
        project.seed(fake)
        job = Job(tmp, fake, fake.pull_event(REPO, NUMBER, "opened"), token=None)
        done = job.run("measure", "--out", str(tmp / "results"), "--seed", "1", cwd=project.root)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "::stop-commands::" in done.stdout  # the PR's output cannot issue workflow commands
    assert job.outputs()["improved"] == "1"
    return tmp / "results"


def ours(fake: FakeGitHub) -> list:
    return [c for c in fake.comments(REPO, NUMBER) if c.body.startswith(MARKER)]


def followups(fake: FakeGitHub) -> list:
    return [i for i in fake.repo(REPO).issues.values()
            if i.pull is not None and i.pull.head_ref == "kernelpilot/pr-7"]  # fmt: skip


def test_a_same_repo_pull_request_gets_one_comment_a_review_and_a_followup(
    project, measured, fake_github, tmp_path
):
    project.seed(fake_github)
    job = Job(tmp_path / "gate", fake_github, fake_github.pull_event(REPO, NUMBER, "opened"))
    assert job.run("gate").returncode == 0
    assert job.outputs()["run"] == "true" and job.outputs()["sha"] == project.head

    publish = Job(tmp_path / "publish", fake_github, fake_github.pull_event(REPO, NUMBER))
    done = publish.run("publish", "--results", str(measured))
    assert done.returncode == 0, done.stderr[-3000:]
    [comment] = ours(fake_github)
    assert comment.author == BOT
    assert "models/act.py:Activation" in comment.body and "✅ faster" in comment.body
    assert "float32[32, 64, 1024]" in comment.body
    [followup] = followups(fake_github)
    assert followup.pull.base_ref == "feature"  # into the pull request's own branch
    assert publish.outputs()["followup-pr-url"].endswith(f"/pull/{followup.number}")
    assert f"/pull/{followup.number}" in comment.body
    verified = fake_github.file(REPO, VERIFIED, "kernelpilot/pr-7").decode()
    assert verified.startswith("# kernelpilot-verified: models/act.py:Activation")
    assert project.head in verified and "class ModelNew(" in verified
    kernel = fake_github.file(REPO, "models/act_kernelpilot.py", "kernelpilot/pr-7").decode()
    assert (
        "class ActivationKernelpilot(_runtime.KernelpilotDropin, _sibling('act').Activation):"
        in kernel
    )
    test_file = fake_github.file(REPO, "tests/test_act_kernelpilot.py", "kernelpilot/pr-7")
    runtime = fake_github.file(REPO, RUNTIME, "kernelpilot/pr-7")
    [review] = fake_github.repo(REPO).review_comments.values()
    assert (review.path, review.line) == ("models/act.py", CLASS_LINE)
    assert "faster than eager" in review.body and f"/pull/{followup.number}" in review.body

    # A second run edits; it creates nothing new.
    posts = len(fake_github.calls("POST"))
    again = Job(tmp_path / "again", fake_github, fake_github.pull_event(REPO, NUMBER))
    assert again.run("publish", "--results", str(measured)).returncode == 0
    assert len(ours(fake_github)) == 1 and len(followups(fake_github)) == 1
    assert len(fake_github.repo(REPO).review_comments) == 1
    made = [call.path for call in fake_github.calls("POST")[posts:]]
    assert made == [f"/repos/{REPO}/git/trees"]  # the same tree: no new commit, nothing new

    # The follow-up's test passes in the repository, with the follow-up's files in it.
    (project.root / VERIFIED).write_text(verified)
    (project.root / "models/act_kernelpilot.py").write_text(kernel)
    (project.root / "tests/test_act_kernelpilot.py").write_bytes(test_file)
    (project.root / RUNTIME).write_bytes(runtime)
    try:
        tested = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "tests/test_act_kernelpilot.py"],
            cwd=project.root, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    finally:
        (project.root / VERIFIED).unlink()
        (project.root / "models/act_kernelpilot.py").unlink()
        (project.root / "tests/test_act_kernelpilot.py").unlink()
        (project.root / RUNTIME).unlink()
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "2 passed" in tested.stdout  # in inference, and over two training steps


def test_a_push_updates_the_comment_and_moves_the_followup_onto_the_new_head(
    project, measured, fake_github, tmp_path
):
    project.seed(fake_github)
    first = Job(tmp_path / "first", fake_github, fake_github.pull_event(REPO, NUMBER))
    assert first.run("publish", "--results", str(measured)).returncode == 0
    [followup] = followups(fake_github)

    # The author pushes again: the module changes once more.
    newer = CHANGED.replace("0.5 * y * y", "0.25 * y * y")
    head2 = commit(project.root, {"models/act.py": newer}, "tune")
    try:
        fake_github.push(REPO, "feature", {"models/act.py": newer}, "tune", sha=head2)
        event = fake_github.pull_event(REPO, NUMBER, "synchronize")
        job = Job(tmp_path / "second", fake_github, event, token=None)
        done = job.run("measure", "--out", str(tmp_path / "results"), "--seed", "2",
                       cwd=project.root)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        publish = Job(tmp_path / "publish2", fake_github, event)
        assert publish.run("publish", "--results", str(tmp_path / "results")).returncode == 0
    finally:
        git(project.root, "reset", "--quiet", "--hard", project.head)

    [comment] = ours(fake_github)
    assert head2[:12] in comment.body and project.head[:12] not in comment.body
    assert followups(fake_github) == [followup]
    branch = fake_github.repo(REPO).refs["refs/heads/kernelpilot/pr-7"]
    assert fake_github.repo(REPO).commits[branch].parents == [head2]
    assert head2 in fake_github.file(REPO, VERIFIED, "kernelpilot/pr-7").decode()


def fork_event(
    fake: FakeGitHub, action: str, label: str | None = None, sender: str = "contributor"
):
    return fake.pull_event(REPO, NUMBER, action, label=label, sender=sender)


def test_a_forks_code_does_not_run_without_the_label_and_the_comment_says_why(
    project, fake_github, tmp_path
):
    project.seed(fake_github, fork=True)
    job = Job(tmp_path, fake_github, fork_event(fake_github, "opened"))
    assert job.run("gate").returncode == 0
    assert job.outputs()["run"] == "false" and job.outputs()["sha"] == ""
    [comment] = ours(fake_github)
    assert "kernelpilot:approved" in comment.body and "fork" in comment.body


def test_a_maintainers_label_approves_the_head_of_that_moment(project, fake_github, tmp_path):
    project.seed(fake_github, fork=True, labels=("kernelpilot:approved",))
    event = fork_event(fake_github, "labeled", "kernelpilot:approved", sender="maintainer")
    job = Job(tmp_path, fake_github, event)
    assert job.run("gate").returncode == 0
    assert job.outputs() == {
        "run": "true", "sha": project.head,
        "reason": f"fork approved by maintainer at {project.head[:12]}",
    }  # fmt: skip


def test_a_label_from_someone_without_write_access_approves_nothing(project, fake_github, tmp_path):
    project.seed(fake_github, fork=True, labels=("kernelpilot:approved",))
    event = fork_event(fake_github, "labeled", "kernelpilot:approved", sender="reader")
    job = Job(tmp_path, fake_github, event)
    assert job.run("gate").returncode == 0
    assert job.outputs()["run"] == "false"


def test_a_push_after_approval_removes_the_label_and_asks_again(project, fake_github, tmp_path):
    project.seed(fake_github, fork=True, labels=("kernelpilot:approved",))
    fake_github.push(f"contributor/{REPO.split('/')[1]}", "feature", {"models/act.py": MODULE},
                     "sneaky")  # fmt: skip
    job = Job(tmp_path, fake_github, fork_event(fake_github, "synchronize"))
    assert job.run("gate").returncode == 0
    assert job.outputs()["run"] == "false"
    assert "kernelpilot:approved" not in fake_github.issue(REPO, NUMBER).labels
    [comment] = ours(fake_github)
    assert "New commits were pushed after approval" in comment.body


@pytest.mark.parametrize("how", ["read-only token", "403 on the comment"])
def test_a_refused_write_falls_back_to_the_job_summary(
    project, measured, fake_github, tmp_path, how
):
    project.seed(fake_github)
    token = "ro-token" if how == "read-only token" else "gh-token"
    if how == "403 on the comment":
        fake_github.fail_next(
            "POST", r"/issues/\d+/comments$", 403, "Resource not accessible by integration"
        )
    job = Job(tmp_path, fake_github, fake_github.pull_event(REPO, NUMBER), token=token)
    done = job.run("publish", "--results", str(measured), "--no-open-pr")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "403" in done.stderr and ours(fake_github) == []
    summary = job.summary.read_text()
    assert "could not write to the pull request" in summary
    assert "models/act.py:Activation" in summary and "✅ faster" in summary


def test_a_secondary_rate_limit_is_waited_out(project, measured, fake_github, tmp_path):
    project.seed(fake_github)
    fake_github.secondary_rate_limit("POST", r"/issues/\d+/comments$", retry_after=1)
    job = Job(tmp_path, fake_github, fake_github.pull_event(REPO, NUMBER))
    done = job.run("publish", "--results", str(measured), "--no-open-pr")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(ours(fake_github)) == 1


def test_results_for_another_pull_request_or_commit_are_refused(
    project, measured, fake_github, tmp_path
):
    project.seed(fake_github)
    fake_github.push(REPO, "feature", {"models/act.py": MODULE}, "newer")
    job = Job(tmp_path, fake_github, fake_github.pull_event(REPO, NUMBER, "synchronize"))
    done = job.run("publish", "--results", str(measured))
    assert done.returncode == 2
    assert "results are for commit" in done.stderr and "this run is for" in done.stderr
    assert ours(fake_github) == [] and followups(fake_github) == []


def test_measure_refuses_a_checkout_that_is_not_the_approved_head(project, fake_github, tmp_path):
    project.seed(fake_github)
    event = fake_github.pull_event(REPO, NUMBER)
    event["pull_request"]["head"]["sha"] = project.base
    job = Job(tmp_path, fake_github, event, token=None)
    done = job.run("measure", "--out", str(tmp_path / "out"), cwd=project.root)
    assert done.returncode == 2
    assert "the approved head is" in done.stderr


def test_the_llm_team_through_an_openai_compatible_server_runs_the_same_flow(
    fake_github, fake_openai, tmp_path
):
    """The measuring job as the action runs it with an LLM key: the real openai client against
    the loopback server, whose planner and coder replies are scripted."""
    from agents.offline import propose
    from harness.problem.load import problem_from_target

    (tmp_path / "checkout").mkdir()
    project = Project(tmp_path / "checkout")
    search = "[tool.kernelpilot.search]\nseed_offline = false\nattempts = 1\n"
    project.head = commit(project.root, {"pyproject.toml": PROJECT + search}, "llm only")
    project.head_files["pyproject.toml"] = PROJECT + search
    project.seed(fake_github)
    problem = problem_from_target(f"{project.root}/models/act.py:Activation", "cpu", None)
    line = "        return torch.tanh(y) * torch.sigmoid(y) + 0.5 * y * y - torch.relu(-y)"
    plan = f"Fuse the chain.\n<<<IMPROVE BEGINS>>>\n{line}\n<<<IMPROVE ENDS>>>\nOne loop.\n"
    kernel = propose(problem).candidate.source
    fake_openai.push(reply(plan), reply(f"```python\n{kernel}\n```\n"))

    event = fake_github.pull_event(REPO, NUMBER)
    job = Job(tmp_path / "measure", fake_github, event, token=None)
    done = job.run(
        "measure", "--out", str(tmp_path / "results"), "--seed", "3", cwd=project.root,
        OPENAI_BASE_URL=fake_openai.base_url, OPENAI_API_KEY="sk-test",
        KERNELPILOT_MODEL="fake-model",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(fake_openai.bodies) == 2 and fake_openai.bodies[0]["model"] == "fake-model"
    publish = Job(tmp_path / "publish", fake_github, event)
    assert publish.run("publish", "--results", str(tmp_path / "results")).returncode == 0
    [comment] = ours(fake_github)
    assert "proposer ` fake-model `" in comment.body and "Fuse the chain." in comment.body
    [followup] = followups(fake_github)
    shipped = fake_github.file(REPO, VERIFIED, "kernelpilot/pr-7").decode()
    assert kernel.strip() in shipped


def test_kernelpilot_review_prints_the_comment_for_the_local_branch(project, tmp_path, monkeypatch):
    """Without --out the reports go under kernelpilot's cache, never into the repository; with
    --write-followup the follow-up's files go into a clone of it, where their test passes."""
    from bot.cli.out_dir import review_folder

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", "--branch", "feature", str(project.root), str(clone))
    untracked = git(project.root, "status", "--porcelain", "--ignored")
    monkeypatch.setenv("KERNELPILOT_CACHE", str(tmp_path / "cache"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "OPENAI_"))}
    done = subprocess.run(
        [sys.executable, "-c", "from bot.cli import main; main()", "review", "--base", "main",
         "--device", "cpu", "--seed", "4", "--write-followup", str(clone)],
        cwd=project.root, capture_output=True, text=True, timeout=900, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(MARKER)
    row = next(line for line in done.stdout.splitlines() if "models/act.py:Activation" in line)
    assert "✅ faster" in row and "float32[32, 64, 1024]" in row
    assert str(project.root) not in done.stdout  # no runner path reaches the comment
    assert "<summary>Kernel: the verified source" in done.stdout  # offered, folded
    assert git(project.root, "status", "--porcelain", "--ignored") == untracked
    folder = review_folder(project.root)
    assert folder.is_relative_to(tmp_path / "cache") and (folder / "results.json").is_file()
    assert str(folder) in done.stderr

    for path in (VERIFIED, "models/act_kernelpilot.py", "tests/test_act_kernelpilot.py", RUNTIME):
        assert f"written: {clone / path}" in done.stderr
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/test_act_kernelpilot.py"],
        cwd=clone, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert tested.returncode == 0, tested.stdout[-3000:]
    assert "2 passed" in tested.stdout


def test_a_pull_request_without_module_changes_gets_a_short_comment_or_none(fake_github, tmp_path):
    (tmp_path / "checkout").mkdir()
    project = Project(tmp_path / "checkout")
    git(project.root, "reset", "--quiet", "--hard", project.base)
    project.head = commit(project.root, {"README.md": "docs only\n"}, "docs")
    project.head_files = {"README.md": "docs only\n"}
    project.seed(fake_github)
    event = fake_github.pull_event(REPO, NUMBER)
    measure = Job(tmp_path / "measure", fake_github, event, token=None)
    done = measure.run("measure", "--out", str(tmp_path / "results"), cwd=project.root)
    assert done.returncode == 0, done.stderr[-3000:]

    quiet = Job(tmp_path / "quiet", fake_github, event)
    done = quiet.run("publish", "--results", str(tmp_path / "results"),
                     "--no-comment-without-modules")  # fmt: skip
    assert done.returncode == 0 and ours(fake_github) == []
    said = Job(tmp_path / "said", fake_github, event)
    assert said.run("publish", "--results", str(tmp_path / "results")).returncode == 0
    [comment] = ours(fake_github)
    assert "No `nn.Module` changed" in comment.body and followups(fake_github) == []


def test_a_refused_review_does_not_stop_the_comment(project, measured, fake_github, tmp_path):
    project.seed(fake_github)
    fake_github.fail_next("POST", r"/pulls/\d+/reviews$", 422, "Line could not be resolved")
    job = Job(tmp_path, fake_github, fake_github.pull_event(REPO, NUMBER))
    done = job.run("publish", "--results", str(measured), "--no-open-pr")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "GitHub refused the review" in done.stderr
    assert len(ours(fake_github)) == 1
