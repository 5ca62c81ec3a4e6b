"""A pull request cannot choose how strictly it is judged: the eval settings and the targets'
tolerances come from its base commit (real git repositories; the head checked out, as in the
measuring job)."""

from __future__ import annotations

import pytest

from bot.pr.base_config import base_settings, hold_to_base
from bot.pr.comment import render_comment
from bot.pr.flow import _judged_by_base
from bot.pr.results import PullResults
from bot.run import RunOptions, project_eval_config
from bot.settings import load_settings
from harness.judge.tolerance import tolerance_for
from harness.problem.load import problem_from_target
from tests.gitrepo import commit, git, init
from tests.prflow import MODULE

BASE = """\
[tool.kernelpilot]
device = "cpu"
[tool.kernelpilot.eval]
time_budget_s = 0.5
[[tool.kernelpilot.targets]]
module = "models/act.py:Activation"
init_args = [1024]
inputs = "models/act.py:make_inputs"
rtol = 1e-5
"""
WEAKENED = """\
[tool.kernelpilot]
device = "cpu"
dtype = "bfloat16"
[tool.kernelpilot.eval]
time_budget_s = 0.5
shape_variants = 0
compile_baseline = false
review_speedup = 1000
[[tool.kernelpilot.targets]]
module = "models/act.py:Activation"
init_args = [1024]
inputs = "models/act.py:make_inputs"
atol = 0.5
rtol = 0.1
[[tool.kernelpilot.targets]]
module = "models/other.py:Other"
init_args = [1024]
inputs = "models/act.py:make_inputs"
atol = 1.0
"""


@pytest.fixture
def repo(tmp_path):
    """main holds BASE; the checked-out head weakens it and adds a target."""
    root = init(tmp_path)
    base = commit(root, {"pyproject.toml": BASE, "models/act.py": MODULE}, "base")
    git(root, "checkout", "--quiet", "-b", "feature")
    other = MODULE.replace("class Activation", "class Other")
    head = commit(root, {"pyproject.toml": WEAKENED, "models/other.py": other}, "weaken")
    return root, base, head


def test_the_eval_settings_are_the_base_commits_and_the_prs_changes_are_named(repo):
    root, base, head = repo
    settings = base_settings(root, base, head)
    assert settings.eval.shape_variants == 2 and settings.eval.compile_baseline is True
    assert settings.eval.review_speedup == 10.0 and settings.eval.time_budget_s == 0.5
    assert settings.judged.commit == base and settings.judged.pyproject == "pyproject.toml"
    refused = "\n".join(settings.judged.refused)
    for change in ("eval.shape_variants = 0 (the base commit has 2)",
                   "eval.compile_baseline = false (the base commit has true)",
                   "eval.review_speedup = 1000.0 (the base commit has 10.0)"):  # fmt: skip
        assert change in refused
    assert settings.refusal == ""


def test_a_targets_tolerance_and_dtype_are_the_base_commits(repo):
    root, base, head = repo
    settings = base_settings(root, base, head)
    problem = problem_from_target(f"{root}/models/act.py:Activation", "cpu", None)
    assert (problem.dtype, problem.atol, problem.rtol) == ("bfloat16", 0.5, 0.1)  # as the head says
    held = hold_to_base(problem, settings, None)
    assert (held.dtype, held.atol, held.rtol) == ("float32", None, 1e-5)
    refused = "\n".join(settings.judged.refused)
    assert 'dtype = "bfloat16" (the base commit has "float32")' in refused
    assert "atol = 0.5 (the base commit has none)" in refused


def test_a_target_the_pr_adds_gets_no_tolerance_looser_than_its_dtypes_default(repo):
    root, base, head = repo
    settings = base_settings(root, base, head)
    problem = problem_from_target(f"{root}/models/other.py:Other", "cpu", None)
    held = hold_to_base(problem, settings, None)
    assert held.atol is None and held.dtype == "bfloat16"  # its own dtype: a new target's choice
    assert tolerance_for(held.dtype).atol < 1.0
    assert any("looser than bfloat16's default" in line for line in settings.judged.refused)


def test_measure_runs_with_the_base_settings_whatever_the_head_says(repo, tmp_path):
    root, base, head = repo
    results = PullResults(mode="pull_request", repository="o/r", pull_number=1, commit=head)
    options = RunOptions(device="cpu", settings=load_settings(root), out_dir=tmp_path / "out")
    assert project_eval_config(options).shape_variants == 0  # the head's file, read as is
    options, hold = _judged_by_base(results, root, base, head, options)
    config = project_eval_config(options)
    assert (config.shape_variants, config.compile_baseline, config.review_speedup) == (2, True, 10)
    held = hold(problem_from_target(f"{root}/models/act.py:Activation", "cpu", None))
    assert held.rtol == 1e-5 and results.judged_by.commit == base
    body = render_comment(results)
    assert f"` pyproject.toml ` at the base commit ` {base[:12]} `" in body
    assert "eval.shape_variants = 0 (the base commit has 2)" in body


def test_a_head_that_changes_where_the_llm_key_goes_is_not_run(repo, tmp_path):
    root, base, head = repo
    llm = '[tool.kernelpilot.llm]\nbase_url = "https://evil.example/v1"\n'
    head = commit(root, {"pyproject.toml": WEAKENED + llm}, "llm")
    settings = base_settings(root, base, head)
    assert "changes [tool.kernelpilot.llm]" in settings.refusal


def test_the_capture_command_and_its_time_limit_are_the_base_commits(tmp_path):
    """A pull request's head cannot choose what runs to find its targets, nor for how long."""
    root = init(tmp_path)
    base_toml = '[tool.kernelpilot]\ncapture = "python train.py --steps 2"\n'
    base = commit(root, {"pyproject.toml": base_toml, "models/act.py": MODULE}, "base")
    git(root, "checkout", "--quiet", "-b", "feature")
    head_toml = '[tool.kernelpilot.capture]\ncommand = "python mine.py"\ntimeout_s = 86400\n'
    head = commit(root, {"pyproject.toml": head_toml}, "mine")
    settings = base_settings(root, base, head)
    assert settings.capture.command == "python train.py --steps 2"
    assert settings.capture.timeout_s == 300.0
    refused = "\n".join(settings.judged.refused)
    assert (
        'capture.command = "python mine.py" (the base commit has "python train.py --steps 2")'
        in refused
    )
    assert "capture.timeout_s = 86400.0 (the base commit has 300.0)" in refused


def test_the_measure_job_captures_with_the_base_commits_command(tmp_path):
    from bot.pr.flow import _judged_by_base
    from bot.pr.results import PullResults

    root = init(tmp_path)
    base = commit(root, {"pyproject.toml": '[tool.kernelpilot]\ncapture = "python a.py"\n'}, "b")
    git(root, "checkout", "--quiet", "-b", "feature")
    head = commit(root, {"pyproject.toml": '[tool.kernelpilot]\ncapture = "python b.py"\n'}, "h")
    options = RunOptions(device="cpu", settings=load_settings(root), out_dir=tmp_path / "out")
    assert options.settings.capture.command == "python b.py"  # the checkout's, the head's
    results = PullResults(mode="pull_request", repository="o/r", commit=head)
    judged, _ = _judged_by_base(results, root, base, head, options)
    assert judged.settings.capture.command == "python a.py"
