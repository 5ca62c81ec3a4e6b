"""The pull-request flow and the nightly on a CUDA GPU, as the action runs them against the fake
GitHub server. On cpu the same flows are tests/test_pr_flow.py, tests/test_nightly.py and
tests/test_nightly_targets.py; here the module's inputs are 16M elements (milliseconds of
memory-bound work on the GPU), torch.compile is the second baseline, and the follow-up's test
runs the kernel on the GPU.

What GitHub would show (the comment, the review comment, the follow-up's body and files), the
jobs' logs and the nights' reports are written under each test's tmp_path: ``--basetemp DIR``
keeps them (bench/gpu_run.sh's prflow and nightly stages do)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bot.pr.followup import build_followup
from bot.pr.results import PullResults
from tests.fake_github import FakeGitHub
from tests.gitrepo import commit, git
from tests.prflow import CHANGED, CLASS_LINE, MODULE, NUMBER, REPO, ROOT, Job, Project
from tests.test_nightly import PNG, cli
from tests.test_pr_flow import RUNTIME, followups, ours

pytestmark = pytest.mark.gpu

SIZE = "[torch.randn(64, 256, 1024)]"  # 16M elements: memory-bound work of milliseconds
PROJECT = """\
[tool.kernelpilot]
device = "cuda"
[tool.kernelpilot.eval]
compile_baseline = true
[[tool.kernelpilot.targets]]
module = "models/act.py:Activation"
init_args = [1024]
inputs = "models/act.py:make_inputs"
"""
FOLLOWUP = f"kernelpilot/pr-{NUMBER}"
KERNEL = "models/act_kernelpilot.py"
VERIFIED = "models/act_verified_kernelpilot.py"
FOLLOWUP_TEST = "tests/test_act_kernelpilot.py"


def sized(source: str) -> str:
    """A version of tests/prflow.py's module with its inputs at the GPU size."""
    return source.replace("[torch.randn(32, 64, 1024)]", SIZE)


def cuda_project(root: Path) -> Project:
    """The pull request's checkout (tests/prflow.py), configured for cuda at the GPU size."""
    root.mkdir()
    return Project(root, PROJECT, sized(MODULE), sized(CHANGED))


def logged(done: subprocess.CompletedProcess, log: Path) -> subprocess.CompletedProcess:
    log.write_text(done.stdout + done.stderr)
    return done


def run_the_jobs(project: Project, fake: FakeGitHub, tmp: Path) -> None:
    """The workflow's three jobs for pull request 7: gate, measure (offline proposer, cuda),
    publish; each must exit 0."""
    event = fake.pull_event(REPO, NUMBER, "opened")
    gate = Job(tmp / "gate", fake, event)
    done = logged(gate.run("gate"), tmp / "gate.log")
    assert done.returncode == 0, done.stderr[-3000:]
    assert gate.outputs()["run"] == "true" and gate.outputs()["sha"] == project.head
    measure = Job(tmp / "measure", fake, event, token=None)
    done = measure.run("measure", "--out", str(tmp / "results"), "--seed", "1", cwd=project.root)
    assert logged(done, tmp / "measure.log").returncode == 0, done.stderr[-3000:]
    assert measure.outputs()["improved"] == "1"
    publish = Job(tmp / "publish", fake, event)
    done = logged(publish.run("publish", "--results", str(tmp / "results")), tmp / "publish.log")
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_pull_request_flow_on_cuda_ships_a_kernel_whose_test_passes_on_the_gpu(
    fake_github, tmp_path
):
    project = cuda_project(tmp_path / "checkout")
    project.seed(fake_github)
    run_the_jobs(project, fake_github, tmp_path)

    [comment] = ours(fake_github)
    (tmp_path / "comment.md").write_text(comment.body)
    row = next(line for line in comment.body.splitlines() if "models/act.py:Activation" in line)
    status = row.split("|")[-2].strip()  # past eval.review_speedup (10x) it asks for a review
    assert status == "✅ faster" or status.startswith("⚠️ faster, over"), row
    assert "float32[64, 256, 1024]" in row and "| - |" not in row, row  # compile timed too
    [review] = fake_github.repo(REPO).review_comments.values()
    (tmp_path / "review-comment.md").write_text(review.body)
    assert (review.path, review.line) == ("models/act.py", CLASS_LINE)
    [followup] = followups(fake_github)
    (tmp_path / "followup-body.md").write_text(followup.body or "")
    assert f"/pull/{followup.number}" in comment.body

    # The follow-up's files in the checkout, and its test run there: the kernel on the GPU.
    for path in (VERIFIED, KERNEL, RUNTIME, FOLLOWUP_TEST):
        content = fake_github.file(REPO, path, FOLLOWUP)
        assert content is not None, f"{path} is not on {FOLLOWUP}"
        for folder in (project.root, tmp_path / "followup"):
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_bytes(content)
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", FOLLOWUP_TEST],
        cwd=project.root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    logged(tested, tmp_path / "followup-test.log")
    assert tested.returncode == 0 and "2 passed" in tested.stdout, tested.stdout[-3000:]


EXAMPLES = {  # where each example goes in the checkout: its [[tool.kernelpilot.targets]] entry
    "examples/fused_gelu_block.py": 'module = "examples/fused_gelu_block.py:Model"\n',
    "examples/swiglu.py": 'module = "examples/swiglu.py:Model"\n',
    "examples/repo_style/blocks.py": 'module = "examples/repo_style/blocks.py:ResidualGate"\n'
    "init_args = [1024]\n"
    'inputs = "examples/repo_style/blocks.py:make_inputs"\n',
}
DELETED = "examples/swiglu.py"  # gone before the third night: reported missing
BENCHMARK = f"kernel:{VERIFIED}"  # the nightly finds the verified file, not the drop-in
TARGET = "target:examples/repo_style/blocks.py:ResidualGate"
NIGHTS = {  # each night's rows: the kernel, then the examples in EXAMPLES' order; its exit
    "night1": (["ok", "ok", "ok", "ok"], 0),
    "night2": (["ok", "ok", "ok", "ok"], 0),
    "stale": (["stale", "ok", "missing", "ok"], 1),
}


def ship_a_kernel_and_configure_the_examples(root: Path, tmp: Path) -> None:
    """The checkout's main branch: the pull request merged with the follow-up that
    ``kernelpilot review`` wrote on the GPU, and kernelpilot's examples configured as targets
    that ship no kernel."""
    review = tmp / "review"
    done = cli("review", "--base", "main", "--seed", "1", "--out", str(review), cwd=root)
    assert logged(done, tmp / "review.log").returncode == 0, done.stderr[-3000:]
    results = PullResults.model_validate_json((review / "results.json").read_text())
    followup = build_followup(results, results.test_dir)
    assert followup is not None, "review found no faster kernel to ship"
    git(root, "checkout", "-q", "main")
    git(root, "merge", "-q", "--ff-only", "feature")
    commit(root, {f.path: f.content for f in followup.files}, "merge the follow-up")
    entries = "".join(f"[[tool.kernelpilot.targets]]\n{entry}" for entry in EXAMPLES.values())
    commit(root, {"pyproject.toml": (root / "pyproject.toml").read_text() + entries,
                  **{path: (ROOT / path).read_text() for path in EXAMPLES}},
           "configure the examples")  # fmt: skip


def test_three_nights_on_cuda_time_the_kernel_and_the_examples_then_report_stale_and_missing(
    tmp_path,
):
    root = cuda_project(tmp_path / "checkout").root
    ship_a_kernel_and_configure_the_examples(root, tmp_path)
    history = tmp_path / "history"

    def night(name: str, *seed: str) -> subprocess.CompletedProcess:
        done = cli("nightly", "--history-dir", str(history), "--out", str(tmp_path / name),
                   *seed, cwd=root)  # fmt: skip
        return logged(done, tmp_path / f"{name}.log")

    runs = {name: night(name, "--seed", "2") for name in ("night1", "night2")}
    retuned = sized(CHANGED.replace("0.5 * y * y", "0.3 * y * y"))
    changed = commit(root, {"models/act.py": retuned, DELETED: None},
                     "retune the activation, drop an example")  # fmt: skip
    runs["stale"] = night("stale")

    codes = {name: done.returncode for name, done in runs.items()}
    assert codes == {name: code for name, (_, code) in NIGHTS.items()}, {
        name: done.stderr[-2000:] for name, done in runs.items()
    }
    rows = {name: json.loads((tmp_path / name / "nightly.json").read_text())["rows"]
            for name in NIGHTS}  # fmt: skip
    statuses = {name: [row["status"] for row in rows[name]] for name in NIGHTS}
    assert statuses == {name: expected for name, (expected, _) in NIGHTS.items()}, rows
    kernel, _, missing, _ = rows["stale"]
    assert "Activation changed since" in kernel["reason"] and changed[:12] in kernel["reason"]
    assert f"deleted by commit {changed[:12]}" in missing["reason"]

    for benchmark, plot in ((BENCHMARK, "history.png"), (TARGET, "history-target.png")):
        printed = cli("history", benchmark, "--history-dir", str(history), "--plot",
                      str(tmp_path / plot), cwd=root)  # fmt: skip
        assert printed.returncode == 0, printed.stderr[-3000:]
        assert "3 night(s)" in printed.stdout and (tmp_path / plot).read_bytes()[:8] == PNG
