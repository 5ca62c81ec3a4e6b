"""The nightly's two jobs as the action runs them (the CLI in a subprocess, GitHub Actions'
environment, the fake GitHub server): the measuring job makes no request to GitHub; the
publishing job writes only where its own run and settings say, and refuses or neutralises a
forged results artifact (the measuring job ran the repository's code, and what that code left
running could rewrite the file before its upload). And: a fork's pull request is not measured
on a runner that is not known to be ephemeral."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest

from bot.event import parse_event
from bot.nightly.history import file_of, plot_of
from bot.nightly.issue import MARKER
from bot.nightly.results import RESULTS_FILE, Expected, load_nightly_results
from bot.nightly.stores import GitHistory
from bot.pr.runner_trust import RunnerNature, refuse_fork_on_persistent_runner, runner_nature
from harness.errors import UserError
from tests.gitrepo import commit, git, init
from tests.prflow import NUMBER, REPO, Job, Project

COMMIT = "c0ffee" + "0" * 34
TODAY = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
KERNEL = "kernel:models/act_kernelpilot.py"
GONE = "target:models/gone.py:Gone"
EVENT = {"schedule": "17 3 * * *", "repository": {"full_name": REPO, "name": "models",
         "owner": {"login": "acme"}, "default_branch": "main"}}  # fmt: skip
EVIL = "evil.example"


def record(benchmark: str, status: str, **fields: Any) -> dict[str, Any]:
    return {"benchmark": benchmark, "night": TODAY, "commit": COMMIT, "device": "cpu",
            "status": status, "run_url": f"https://{EVIL}/run", **fields}  # fmt: skip


def night(**changes: Any) -> dict[str, Any]:
    """What `kernelpilot github nightly-measure` writes: a kernel timed ok, a target missing."""
    rows = [
        {"benchmark": KERNEL, "status": "ok", "record": record(KERNEL, "ok", time_ms=1.0,
                                                                  eager_ms=3.0)},
        {"benchmark": GONE, "status": "missing", "reason": "models/gone.py does not exist",
         "record": record(GONE, "missing", note="models/gone.py does not exist")},
    ]  # fmt: skip
    return {"schema_version": 1, "repository": REPO, "commit": COMMIT, "night": TODAY,
            "rows": rows, "run_url": f"https://{EVIL}/run", **changes}  # fmt: skip


@pytest.fixture
def publishing(fake_github, tmp_path):
    """The publishing job: the repository on the fake server, its write token, the event."""
    fake_github.add_user("gh-token", "github-actions[bot]", "write")
    fake_github.add_repo(REPO, files={"README.md": "models\n"})
    job = Job(tmp_path / "job", fake_github, EVENT, name="schedule")
    job.env["GITHUB_SHA"] = COMMIT

    def publish(results: dict[str, Any] | str, **env: str):
        folder = tmp_path / "artifact"
        folder.mkdir(exist_ok=True)
        text = results if isinstance(results, str) else json.dumps(results)
        (folder / RESULTS_FILE).write_text(text)
        return job.run("nightly-publish", "--results", str(folder), **env)

    return publish


def writes(fake) -> list:
    return [r for r in fake.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]


def test_publish_writes_the_night_where_its_own_settings_say(fake_github, publishing):
    done = publishing(night(), KERNELPILOT_DATA_BRANCH="bench-data")
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = fake_github.file(REPO, file_of(KERNEL), "bench-data").decode().splitlines()
    written = json.loads(line)
    assert written["time_ms"] == 1.0 and written["commit"] == COMMIT
    assert written["run_url"] == f"{fake_github.root}/{REPO}/actions/runs/42"  # not the artifact's
    assert fake_github.file(REPO, plot_of(GONE), "bench-data").startswith(b"\x89PNG")
    assert fake_github.file(REPO, file_of(KERNEL), "main") is None
    [issue] = [i for i in fake_github.repo(REPO).issues.values() if i.pull is None]
    assert (
        issue.body.startswith(MARKER) and "0 slower or failing, 1 stale or missing" in issue.title
    )


def _rows(results: dict[str, Any], edit) -> dict[str, Any]:
    edit(results["rows"])
    return results


FORGED = {
    "names_a_branch": (lambda: night(branch="main"), "Extra inputs are not permitted"),
    "names_an_issue": (lambda: night(issue=1), "Extra inputs are not permitted"),
    "another_repository": (lambda: night(repository="acme/other"), "'acme/other'"),
    "another_commit": (lambda: night(commit="b" * 40), "for commit"),
    "a_record_of_another_commit": (
        lambda: _rows(night(), lambda rows: rows[0]["record"].update(commit="b" * 40)),
        "another commit or night",
    ),
    "another_night": (
        lambda: _rows(
            night(night="2020-01-01"),
            lambda rows: [row["record"].update(night="2020-01-01") for row in rows],
        ),  # fmt: skip
        "not this run's",
    ),
    "a_path_out_of_the_repository": (
        lambda: _rows(
            night(),
            lambda rows: rows[0].update(
                benchmark="kernel:../../etc/x_kernelpilot.py",
                record=record("kernel:../../etc/x_kernelpilot.py", "ok"),
            ),
        ),  # fmt: skip
        "not a benchmark name",
    ),
    "a_status_of_its_own": (
        lambda: _rows(night(), lambda rows: rows[0].update(status="ok<br>")),
        "is not one the nightly writes",
    ),
    "too_many_rows": (
        lambda: _rows(
            night(),
            lambda rows: rows.extend(
                {
                    "benchmark": f"target:m{i}.py:M",
                    "status": "ok",
                    "record": record(f"target:m{i}.py:M", "ok"),
                }
                for i in range(500)
            ),
        ),  # fmt: skip
        "more than 500",
    ),
    "a_long_text": (
        lambda: _rows(night(), lambda rows: rows[1].update(reason="x" * 5000)),
        "longer than 4000",
    ),
    # Valid JSON, each field within bounds: only the file's size gives it away.
    "oversized": (lambda: json.dumps(night()) + " " * (9 * 1024 * 1024), "bytes, over"),
}


@pytest.mark.parametrize("case", FORGED)
def test_a_forged_artifact_is_refused_before_any_write(fake_github, publishing, case):
    forged, said = FORGED[case]
    done = publishing(forged())
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert said in done.stderr and "nightly results" in done.stderr
    assert writes(fake_github) == []


def outside_code(markdown: str) -> str:
    """The markdown with its code spans taken out (CommonMark: a run of n backticks up to the
    next run of exactly n)."""
    return re.sub(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)", "", markdown)


def test_markdown_in_the_artifact_is_shown_as_code(fake_github, publishing):
    """Names and reasons from the measuring job (the repository's file names, its modules'
    errors) reach the issue as code: no link, image, mention or HTML of theirs is rendered."""
    name = f"kernel:models/![x]({EVIL}/t.png) @acme-team | `</code><img src=x>`_kernelpilot.py"
    reason = (f"@acme/admins see [login](https://{EVIL}/phish) ![t](https://{EVIL}/t.png) "
              f"<img src=https://{EVIL}/p> ``` | table | break\nwhere: <a href=//{EVIL}>x</a>")  # fmt: skip

    def hostile(rows):
        rows[0].update(benchmark=name, record=record(name, "failed", note=reason), status="failed",
                       reason=reason)  # fmt: skip

    done = publishing(_rows(night(), hostile))
    assert done.returncode == 0, done.stderr[-3000:]
    [issue] = [i for i in fake_github.repo(REPO).issues.values() if i.pull is None]
    assert EVIL in issue.body and "@acme" in issue.body  # shown, as text
    # Our own plot links: the benchmark only as a slug of [A-Za-z0-9._-], on the data branch.
    plot = re.compile(
        rf"!\[plot [\w.-]+\]\({re.escape(fake_github.root)}/{REPO}/blob/kernelpilot-data/"
        r"plots/[\w.-]+\.png\?raw=true\)"
    )
    lines = issue.body.splitlines()
    assert sum(bool(plot.fullmatch(line)) for line in lines) == 2
    bare = outside_code("\n".join(line for line in lines if not plot.fullmatch(line)))
    for live in (EVIL, "@acme", "<img", "<a ", "</code>", "](http"):
        assert live not in bare, f"{live!r} outside code in:\n{issue.body}"
    table_rows = [line for line in issue.body.splitlines() if line.startswith("| ")]
    assert all(len(re.findall(r"(?<!\\)\|", row)) == 7 for row in table_rows)  # 6 cells each
    history = [
        p for p in fake_github.repo(REPO).tree("kernelpilot-data") if p.startswith("history/")
    ]
    assert all(re.fullmatch(r"history/[A-Za-z0-9._-]+\.jsonl", path) for path in history)


# -- the measuring job -------------------------------------------------------------------------

MISSING_TARGET = """\
[tool.kernelpilot]
device = "cpu"
[[tool.kernelpilot.targets]]
module = "models/gone.py:Gone"
inputs = [[4, 8]]
"""


def test_the_measuring_job_makes_no_request_to_github(fake_github, tmp_path):
    """Even with a write token in its environment (a workflow that passed one), nightly-measure
    reads the history from its checkout and talks to no GitHub; publish accepts what it wrote."""
    fake_github.add_user("gh-token", "github-actions[bot]", "write")
    fake_github.add_repo(REPO)
    (tmp_path / "repo").mkdir()
    repo = init(tmp_path / "repo")
    head = commit(repo, {"pyproject.toml": MISSING_TARGET}, "a target whose file is gone")
    job = Job(tmp_path / "job", fake_github, EVENT, name="schedule")
    out = tmp_path / "out"
    done = job.run("nightly-measure", "--repo", str(repo), "--device", "cpu", "--out", str(out),
                   GITHUB_SHA=head)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # a missing target breaks the night
    assert fake_github.requests == []
    today = datetime.datetime.now(datetime.timezone.utc).date()
    results = load_nightly_results(out, Expected(repository=REPO, commit=head, today=today))
    assert [(row.benchmark, row.status) for row in results.rows] == [(GONE, "missing")]


def test_the_history_is_read_from_the_checkouts_data_branch(tmp_path):
    """What a checkout with full history has: origin/kernelpilot-data (no local branch)."""
    (tmp_path / "upstream").mkdir()
    upstream = init(tmp_path / "upstream")
    commit(upstream, {"README.md": "x\n"}, "main")
    git(upstream, "checkout", "--quiet", "--orphan", "kernelpilot-data")
    lines = [json.dumps(record(KERNEL, "ok", time_ms=t)) for t in (1.0, 1.1)]
    commit(upstream, {file_of(KERNEL): "\n".join([lines[0], "{not json", lines[1]]) + "\n",
                      "plots/x.png": b"\x89PNG"}, "two nights")  # fmt: skip
    git(upstream, "checkout", "--quiet", "main")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "--quiet", str(upstream), str(clone))
    history = GitHistory(clone).load()
    assert [r.time_ms for r in history.records[KERNEL]] == [1.0, 1.1]
    [problem] = history.problems
    assert problem.path == file_of(KERNEL) and problem.line == 2
    assert GitHistory(clone, "no-such-branch").load().records == {}


# -- which runner may run a fork's code --------------------------------------------------------

HOSTILE = "\nimport pathlib\npathlib.Path(__file__).with_name('ran-on-import').write_text('ran')\n"


def test_a_forks_pull_request_is_refused_on_a_runner_not_known_to_be_ephemeral(
    fake_github, tmp_path
):
    (tmp_path / "repo").mkdir()
    project = Project(tmp_path / "repo")
    head = (project.root / "models/act.py").read_text() + HOSTILE
    project.head = commit(project.root, {"models/act.py": head}, "import side effect")
    project.head_files["models/act.py"] = head
    project.seed(fake_github, fork=True, labels=("kernelpilot:approved",))
    event = fake_github.pull_event(REPO, NUMBER, "labeled", label="kernelpilot:approved",
                                   sender="maintainer")  # fmt: skip
    job = Job(tmp_path / "job", fake_github, event, token=None)
    done = job.run("measure", "--repo", str(project.root), "--device", "cpu",
                   RUNNER_ENVIRONMENT="self-hosted", RUNNER_NAME="gpu-box-1")  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"refusing to run the code of pull request #{NUMBER} from the fork" in done.stderr
    assert "gpu-box-1" in done.stderr and "ephemeral-runner: true" in done.stderr
    assert not (project.root / "models/ran-on-import").exists()


def _event(fork: bool):
    head_repo = "someone/models" if fork else REPO
    return parse_event("pull_request_target", {
        "action": "labeled", "repository": {"full_name": REPO},
        "pull_request": {"number": 7, "head": {"sha": "a" * 40, "ref": "f",
                                               "repo": {"full_name": head_repo}},
                         "base": {"sha": "b" * 40, "ref": "main", "repo": {"full_name": REPO}}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("environ", "fork", "refused"),
    [
        ({"RUNNER_ENVIRONMENT": "self-hosted"}, True, True),
        ({}, True, True),  # unknown: not assumed ephemeral
        (
            {"RUNNER_ENVIRONMENT": "self-hosted", "KERNELPILOT_EPHEMERAL_RUNNER": "false"},
            True,
            True,
        ),
        (
            {"RUNNER_ENVIRONMENT": "self-hosted", "KERNELPILOT_EPHEMERAL_RUNNER": "true"},
            True,
            False,
        ),
        ({"RUNNER_ENVIRONMENT": "github-hosted"}, True, False),
        ({"RUNNER_ENVIRONMENT": "self-hosted"}, False, False),  # the repository's own branch
    ],
)
def test_which_runner_may_run_a_forks_code(environ, fork, refused):
    nature = runner_nature(environ)
    if refused:
        with pytest.raises(UserError, match="not known to be ephemeral"):
            refuse_fork_on_persistent_runner(_event(fork), nature)
    else:
        refuse_fork_on_persistent_runner(_event(fork), nature)


def test_a_declaration_that_is_neither_true_nor_false_is_an_error():
    with pytest.raises(UserError, match="neither true nor false"):
        runner_nature({"KERNELPILOT_EPHEMERAL_RUNNER": "yes"})
    assert RunnerNature(environment="github-hosted").ephemeral
