"""The nightly run over a configured target that ships no kernel: eager and torch.compile of
its module timed for real in a baseline worker (no candidate), recorded in the history, and
judged by the regression rule on its eager time; the harness's baseline worker on its own."""

from __future__ import annotations

import datetime
import json

import pytest

from bot.nightly.configured import configured_targets, missing
from bot.nightly.measure import Tonight, night_fields, target_row
from bot.nightly.regression import RegressionConfig
from bot.nightly.results import Expected, NightlyResults, load_nightly_results
from bot.nightly.run import NightlyReport, render_junit
from bot.nightly.stores import LocalStore
from bot.settings import load_settings
from harness.config import EvalConfig
from harness.errors import UserError
from harness.evaluate import Evaluator
from harness.judge import baseline
from harness.judge.baseline import time_baselines
from harness.problem.load import problem_from_target
from harness.timings import WindowLoad
from tests.gitrepo import commit, git, init
from tests.test_busy import stats
from tests.test_nightly import PNG, cli

BENCHMARK = "target:models/scale.py:Scale"
MODULE = """\
import time

import torch
from torch import nn


class Scale(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return torch.tanh(x * self.weight) + x


class Sleepy(nn.Module):
    def forward(self, x):
        time.sleep(60)
        return x
"""
PROJECT = """\
[tool.kernelpilot]
device = "cpu"
[tool.kernelpilot.eval]
time_budget_s = 0.05
warmup = 1
min_reps = 5
[[tool.kernelpilot.targets]]
module = "models/scale.py:Scale"
init_args = [256]
inputs = [[16, 256]]
"""


@pytest.fixture(scope="module")
def configured(tmp_path_factory):
    root = init(tmp_path_factory.mktemp("configured"))
    commit(root, {"pyproject.toml": PROJECT, "models/scale.py": MODULE}, "a configured target")
    return root


def test_a_target_without_a_kernel_has_eager_and_compile_timed_and_judged(configured, tmp_path):
    history = tmp_path / "history"
    done = cli("nightly", "--device", "cpu", "--history-dir", str(history), "--out",
               str(tmp_path / "n1"), "--seed", "2", cwd=configured)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [first] = LocalStore(history).load().records[BENCHMARK]
    assert first.status == "ok" and first.time_ms is None
    assert first.eager_ms and first.compile_ms and first.eager_iqr_ms >= 0
    assert first.device_name and first.torch
    table = (tmp_path / "n1" / "nightly.md").read_text()
    assert (
        f"| `{BENCHMARK}` | ok | — | {first.eager_ms:.3f} ms | {first.compile_ms:.3f} ms |" in table
    )
    junit = (tmp_path / "n1" / "junit.xml").read_text()
    assert 'failures="0"' in junit and "no shipped kernel: eager" in junit
    assert (history / "plots" / "target_models_scale.py_Scale.png").read_bytes()[:8] == PNG

    # Earlier nights at 10 ns, far below any call of a module (not a fraction of the first
    # night's time: on a loaded 2-core machine that median was once 150x tonight's): tonight's
    # eager is measured again, stays slower, and fails the night (torch.compile off: eager
    # alone is judged).
    seeded = tmp_path / "seeded"
    LocalStore(seeded).append(
        [first.model_copy(update={"night": f"2026-11-{day:02d}", "eager_ms": 1e-5,
                                  "eager_iqr_ms": 1e-7, "compile_ms": None})
         for day in range(10, 18)]
    )  # fmt: skip
    done = cli("nightly", "--device", "cpu", "--history-dir", str(seeded), "--out",
               str(tmp_path / "n2"), "--no-compile-baseline", "--seed", "3", cwd=configured)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    tonight = LocalStore(seeded).load().records[BENCHMARK][-1]
    assert len(tonight.remeasured_eager_ms) == 1 and tonight.compile_ms is None
    row = json.loads((tmp_path / "n2" / "nightly.json").read_text())["rows"][0]
    assert row["status"] == "fail" and row["reason"].startswith("eager +")
    # As configured in pyproject.toml, without the 'target:' prefix of the history's name.
    printed = cli("history", "models/scale.py:Scale", "--history-dir", str(seeded), cwd=configured)
    assert printed.returncode == 0 and "9 night(s)" in printed.stdout
    assert f"{tonight.eager_ms:.4f}" in printed.stdout


def test_the_baseline_worker_times_eager_alone_and_reports_a_hung_module(configured):
    config = EvalConfig(compile_baseline=False, time_budget_s=0.05, warmup=1, min_reps=3)
    problem = problem_from_target(str(configured / "models/scale.py:Scale"), "cpu", None)
    report = time_baselines(problem, config, seed=1)
    assert report.eager.samples >= 3 and report.compiled is None
    assert report.input_summary == "float32[16, 256]" and report.torch_version

    sleepy = problem.model_copy(update={"class_name": "Sleepy", "name": "Sleepy", "init_args": []})
    with pytest.raises(UserError) as caught:
        time_baselines(sleepy, config.model_copy(update={"run_timeout_s": 8}), seed=1)
    assert "took longer than" in caught.value.what and "Sleepy" in caught.value.where
    assert "run_timeout_s" in caught.value.fix


def test_a_target_is_missing_when_its_file_or_its_class_is_gone(tmp_path):
    root = init(tmp_path)
    commit(root, {"pyproject.toml": PROJECT.replace("models/scale.py", "src/../models/scale.py"),
                  "models/scale.py": MODULE}, "base")  # fmt: skip
    [target] = configured_targets(root, load_settings(root))
    assert (target.module_path, target.benchmark) == ("models/scale.py", BENCHMARK)
    assert missing(root, target) is None
    renamed = commit(root, {"models/scale.py": MODULE.replace("class Scale", "class Scaled")})
    gone = missing(root, target)
    assert gone is not None and gone.what == (
        f"Scale is no longer defined in models/scale.py (the file last changed in commit {renamed[:12]})"
    )
    assert (
        gone.where
        == "pyproject.toml: tool.kernelpilot.targets module = 'src/../models/scale.py:Scale'"
    )
    commit(root, {"models/scale.py": "class Scale(:\n"})  # does not parse: loading says why
    assert missing(root, target) is None
    deleted = commit(root, {"models/scale.py": None})
    gone = missing(root, target)
    assert gone is not None and f"does not exist (deleted by commit {deleted[:12]})" in gone.what


def test_a_target_the_machine_is_too_busy_to_time_is_not_judged_and_does_not_fail_the_night(
    configured, monkeypatch, tmp_path
):
    """Every baseline worker reports a busy window (its real report, with the load of a busy
    machine written in): timed again ``busy_retries`` times, then "unjudged": no time in the
    history, not a failure, skipped in JUnit, and accepted by the publishing job."""
    real, tries = baseline._time_once, []

    def busy(*args):
        report = real(*args)
        report.eager = stats(report.eager.median_ms, preempted=60)
        report.window = WindowLoad(seconds=1.0, cores=2.0, others_cores=1.7)
        tries.append(report)
        return report

    monkeypatch.setattr(baseline, "_time_once", busy)
    config = EvalConfig(compile_baseline=False, time_budget_s=0.05, warmup=1, min_reps=3)
    [target] = configured_targets(configured, load_settings(configured))
    said: list[str] = []
    head, night = git(configured, "rev-parse", "HEAD"), str(datetime.date.today())
    tonight = Tonight(repo=configured, device="cpu", evaluator=Evaluator(config), rule=RegressionConfig(),
                      progress=said.append, seed=1, base=night_fields(night, head, "", "cpu"))  # fmt: skip
    row = target_row(tonight, target, earlier=[])
    assert len(tries) == config.busy_retries + 1
    assert sum("timing again in a fresh worker" in line for line in said) == config.busy_retries
    assert row.status == row.record.status == "unjudged" and not row.failed and not row.breaks_night
    assert row.reason.startswith("not judged: the machine was too busy (worker 1: alone: preempted")
    assert row.record.eager_ms is None and row.verdict is None
    report = NightlyReport(commit=head, night=night, rows=[row])
    assert "<skipped" in render_junit(report) and 'failures="0"' in render_junit(report)
    results = NightlyResults(repository="o/r", commit=head, night=night, rows=[row])
    results.save(tmp_path)
    loaded = load_nightly_results(
        tmp_path, Expected(repository="o/r", commit=head, today=datetime.date.today())
    )
    assert loaded.rows[0].status == "unjudged"
