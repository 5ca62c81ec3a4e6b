"""Zero-config targets in the pull-request flow: a change to a module that nothing configures,
in a real git repository whose tests build it from a config object, gets a target from those
tests, is optimized, and can be frozen into pyproject.toml by `kernelpilot targets --write`."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from bot.cli import main
from bot.pr.flow import review_local
from bot.run import RunOptions
from bot.settings import load_settings
from tests.conftest import FIXTURES
from tests.gitrepo import commit, git, init

# A chain long enough that the fused kernel wins by far at the captured call's 32 x 64 (eager
# pays a call per op): the follow-up below needs an improved verdict on a loaded 2-core machine,
# where three ops' margin (1.7x) was once judged within the noise.
CHANGED_MLP = """
    def forward(self, x):
        y = torch.tanh(x) * (self.scale * 0.5) + self.shift
        return torch.sigmoid(y) * y - torch.relu(-y) + 0.5 * y * y
"""


@pytest.fixture
def pull(tmp_path) -> Path:
    """A repository at the head of a pull request that changes MLP.forward."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURES / "capture_repo", repo)
    init(repo)
    commit(repo, {}, "base")
    git(repo, "checkout", "--quiet", "-b", "change")
    model = (repo / "model.py").read_text()
    old = "    def forward(self, x):\n        return torch.tanh(x) * self.scale + self.shift\n"
    commit(repo, {"model.py": model.replace(old, CHANGED_MLP.lstrip("\n"))}, "scale the MLP")
    return repo


def test_targets_lists_the_captured_module_and_freezes_it(pull):
    runner = CliRunner()
    listed = runner.invoke(
        main, ["targets", "--base", "main", "--repo", str(pull), "--device", "cpu"]
    )
    assert listed.exit_code == 0, listed.output
    assert (
        "model.py:MLP  captured: built at tests/test_model.py:7, called with float32[32, 64]"
        in listed.output
    )
    written = runner.invoke(
        main, ["targets", "--base", "main", "--repo", str(pull), "--device", "cpu", "--write"]
    )
    assert written.exit_code == 0, written.output
    assert "model.py:MLP" in (pull / "pyproject.toml").read_text()
    assert (
        "GPTConfig(n_embd=64, scale=2.0, vocab_size=100)"
        in (pull / "kernelpilot_targets.py").read_text()
    )
    assert "commit both" in written.output
    unused = runner.invoke(
        main, ["targets", "--base", "main", "--repo", str(pull), "--device", "cpu"]
    )
    assert "pyproject.toml has uncommitted changes, not used" in unused.output
    commit(pull, {}, "freeze the captured targets")
    again = runner.invoke(
        main, ["targets", "--base", "main", "--repo", str(pull), "--device", "cpu"]
    )
    assert "model.py:MLP  configured in pyproject.toml" in again.output  # configuration wins
    refused = runner.invoke(
        main, ["targets", "--base", "main", "--repo", str(pull), "--device", "cpu", "--write"]
    )
    assert refused.exit_code == 0 and "no captured target to write" in refused.output


def test_a_pull_request_changing_an_unconfigured_module_gets_it_measured(pull, tmp_path):
    options = RunOptions(
        device="cpu", settings=load_settings(pull), out_dir=tmp_path / "out", llm="offline",
        compile_baseline=False, time_budget_s=0.3,
    )  # fmt: skip
    results = review_local(pull, "main", "change", options, lambda message: None)
    [module] = [m for m in results.changes.modules if m.class_name == "MLP"]
    assert module.target_source == "capture" and "tests/test_model.py:7" in module.capture_note
    [row] = results.report.targets
    assert row.target == "model.py:MLP"
    assert row.result.status.value == "ok", row.result.reason
    assert row.result.input_summary.startswith("float32[32, 64]")
    assert row.improved, (row.result.vs_eager, row.result.reason)  # else no follow-up is built
    # The follow-up a maintainer merges: built with the captured config object, its test passes
    # (inference on the kernel, two training steps on the original) in the repository.
    import subprocess
    import sys

    from bot.pr.followup import build_followup
    from bot.pr.local_followup import write_followup

    source = results.sources["model.py:MLP"]
    assert source.init_call == "[GPTConfig(n_embd=64, scale=2.0, vocab_size=100)]"
    followup = build_followup(results, results.test_dir)
    assert followup is not None
    write_followup(followup, pull, force=False)
    tests = [f.path for f in followup.files if Path(f.path).name.startswith("test_")]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests],
        cwd=pull, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]


def test_a_captured_constructor_reaches_the_followup_when_the_base_holds_the_target(
    tmp_path, monkeypatch
):
    """measure holds each target to the base's settings, which may give it a new Problem: the
    captured constructor call still goes with it into results.json (paired by place)."""
    import bot.pr.flow as flow
    from bot.detect.changes import ChangeReport
    from bot.pr.results import PullResults
    from bot.report import Report, TargetReport, TargetStatus
    from harness.capture.records import ArgSpec, CallSpec, CapturedTarget, TensorSpec
    from harness.capture.run import captured_problem

    (tmp_path / "model.py").write_text("class MLP: pass\n")
    spec = TensorSpec(shape=[4, 8], dtype="float32", low=-1.0, high=1.0)
    target = CapturedTarget(
        path="model.py", class_name="MLP", source="tests/test_model.py", init_file="init-0.pt",
        init_expression="[GPTConfig(n_embd=8)]", init_imports=["from model import GPTConfig"],
        calls=[CallSpec(args=[ArgSpec(tensor=spec)])],
    )  # fmt: skip
    problem = captured_problem(target, tmp_path, tmp_path, "cpu", "float32")
    monkeypatch.setattr(
        flow, "run_targets",
        lambda items, *_: Report(targets=[
            TargetReport.failed(item.name, "cpu", TargetStatus.no_candidate, "") for item in items
        ]),
    )  # fmt: skip
    changes = ChangeReport(base="main", head="h", base_sha="b" * 40, head_sha="a" * 40,
                           merge_base="b" * 40, max_targets=20)  # fmt: skip
    results = PullResults(mode="pull_request", repository="o/r", commit="a" * 40, changes=changes)
    options = RunOptions(device="cpu", settings=load_settings(tmp_path), out_dir=tmp_path / "o")
    held = lambda item: item.model_copy(update={"rtol": None})  # noqa: E731 - a new Problem
    flow._optimize(results, tmp_path, [], options, lambda _: None, held, [(target, problem)])
    assert results.sources["model.py:MLP"].init_call == "[GPTConfig(n_embd=8)]"
