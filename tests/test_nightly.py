"""The nightly run on cpu over a repository that ships a kernel: a real verified kernel (from the
pull-request flow's follow-up) merged into the checkout, re-verified and timed for real each
night; earlier nights are seeded numbers, judged by the regression rule; a change to the
module makes the kernel stale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bot.nightly.history import Record
from bot.nightly.measure import Tonight, kernel_row, night_fields
from bot.nightly.regression import RegressionConfig
from bot.nightly.shipped import find_shipped
from bot.nightly.stores import LocalStore
from bot.pr.followup import build_followup
from bot.pr.results import PullResults
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.judge import verdict
from tests.gitrepo import commit, git
from tests.prflow import CHANGED, Project

KERNEL = "models/act_verified_kernelpilot.py"  # the kernel as verified, which the nightly finds
BENCHMARK = f"kernel:{KERNEL}"
PNG = b"\x89PNG\r\n\x1a\n"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "OPENAI_"))}
    return subprocess.run(
        [sys.executable, "-c", "from bot.cli import main; main()", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Project:
    """A checkout whose main branch has the module and kernelpilot's merged follow-up."""
    root = tmp_path_factory.mktemp("shipping")
    project = Project(root)
    out = root.parent / f"{root.name}-review"
    done = cli("review", "--base", "main", "--device", "cpu", "--seed", "1", "--out", str(out),
               cwd=project.root)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = PullResults.model_validate_json((out / "results.json").read_text())
    followup = build_followup(results, results.test_dir)
    assert followup is not None
    commit(project.root, {file.path: file.content for file in followup.files}, "merge follow-up")
    return project


def night(date: str, time_ms: float, setup: Record) -> Record:
    return setup.model_copy(update={"night": date, "time_ms": time_ms, "iqr_ms": 0.01 * time_ms,
                                    "remeasured_ms": []})  # fmt: skip


def test_a_night_records_and_judges_the_shipped_kernel(shipped, tmp_path):
    history = tmp_path / "history"
    done = cli("nightly", "--device", "cpu", "--history-dir", str(history), "--out",
               str(tmp_path / "n1"), "--no-compile-baseline", "--seed", "2", cwd=shipped.root)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    [first] = LocalStore(history).load().records[BENCHMARK]
    assert first.status == "ok" and first.time_ms and first.eager_ms
    assert first.time_ms < first.eager_ms  # the shipped kernel is still the faster one
    report = json.loads((tmp_path / "n1" / "nightly.json").read_text())
    assert report["rows"][0]["verdict"]["level"] == "too_few"
    assert 'failures="0"' in (tmp_path / "n1" / "junit.xml").read_text()

    # Seeded earlier nights at 10 ns, far below any call of a kernel (not a fraction of the
    # first night's time: a loaded 2-core machine moved a cpu median by 150x once): tonight
    # looks far slower, is measured again, stays slower, and fails.
    seeded = history / "seeded"
    LocalStore(seeded).append([night(f"2026-11-{day:02d}", 1e-5, first) for day in range(10, 18)])
    done = cli("nightly", "--device", "cpu", "--history-dir", str(seeded), "--out",
               str(tmp_path / "n2"), "--no-compile-baseline", "--seed", "3", cwd=shipped.root)  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]
    tonight = LocalStore(seeded).load().records[BENCHMARK][-1]
    assert len(tonight.remeasured_ms) == 1  # confirmed by a second measurement in the run
    row = json.loads((tmp_path / "n2" / "nightly.json").read_text())["rows"][0]
    assert row["status"] == "fail" and "vs the last nights" in row["reason"]
    assert 'failures="1"' in (tmp_path / "n2" / "junit.xml").read_text()

    plot = seeded / "plots" / "kernel_models_act_verified_kernelpilot.py.png"
    assert plot.read_bytes()[:8] == PNG
    printed = cli("history", BENCHMARK, "--history-dir", str(seeded), "--plot",
                  str(tmp_path / "series.png"), cwd=shipped.root)  # fmt: skip
    assert printed.returncode == 0 and "9 night(s)" in printed.stdout
    assert "2026-11-10" in printed.stdout
    assert (tmp_path / "series.png").read_bytes()[:8] == PNG


def test_a_kernel_whose_class_changed_is_stale_with_the_commit_that_changed_it(shipped, tmp_path):
    head = git(shipped.root, "rev-parse", "HEAD")
    try:
        changed = commit(shipped.root, {"models/act.py": CHANGED.replace("0.5 * y * y", "0.3 * y * y")},
                         "retune")  # fmt: skip
        done = cli("nightly", "--device", "cpu", "--history-dir", str(tmp_path / "h"), "--out",
                   str(tmp_path / "n"), "--no-compile-baseline", cwd=shipped.root)  # fmt: skip
        assert done.returncode == 1, done.stderr[-3000:]
        [record] = LocalStore(tmp_path / "h").load().records[BENCHMARK]
        assert record.status == "stale" and changed[:12] in record.note
        assert "Activation changed since" in record.note

        deleted = commit(shipped.root, {"models/act.py": None}, "remove the module")
        done = cli("nightly", "--device", "cpu", "--history-dir", str(tmp_path / "h"), "--out",
                   str(tmp_path / "n"), "--no-compile-baseline", cwd=shipped.root)  # fmt: skip
        assert done.returncode == 1
        record = LocalStore(tmp_path / "h").load().records[BENCHMARK][-1]
        assert "was deleted" in record.note and deleted[:12] in record.note
    finally:
        git(shipped.root, "reset", "--quiet", "--hard", head)


BROKEN = """\
from torch import nn


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("needs a checkpoint that is not there")

    def forward(self, x):
        return x
"""
MORE_TARGETS = """
[[tool.kernelpilot.targets]]
module = "models/extra.py:Extra"
inputs = [[4, 8]]
[[tool.kernelpilot.targets]]
module = "models/broken.py:Broken"
inputs = [[4, 8]]
"""


def test_a_deleted_target_is_missing_and_a_broken_one_failed_while_the_kernel_is_recorded(
    shipped, tmp_path
):
    head = git(shipped.root, "rev-parse", "HEAD")
    extra = "from torch import nn\n\n\nclass Extra(nn.Identity):\n    pass\n"
    try:
        pyproject = (shipped.root / "pyproject.toml").read_text() + MORE_TARGETS
        commit(shipped.root, {"pyproject.toml": pyproject, "models/extra.py": extra,
                              "models/broken.py": BROKEN}, "two more targets")  # fmt: skip
        deleted = commit(shipped.root, {"models/extra.py": None}, "remove Extra")
        done = cli("nightly", "--device", "cpu", "--history-dir", str(tmp_path / "h"), "--out",
                   str(tmp_path / "n"), "--no-compile-baseline", "--seed", "4", cwd=shipped.root)  # fmt: skip
        assert done.returncode == 1, done.stderr[-3000:]
        records = LocalStore(tmp_path / "h").load().records
        assert set(records) == {BENCHMARK, "target:models/extra.py:Extra",
                                "target:models/broken.py:Broken"}  # the shipped target: once  # fmt: skip
        assert records[BENCHMARK][0].status == "ok" and records[BENCHMARK][0].time_ms
        [gone] = records["target:models/extra.py:Extra"]
        assert gone.status == "missing" and "models/extra.py does not exist" in gone.note
        assert deleted[:12] in gone.note and "tool.kernelpilot.targets" in gone.note
        assert f"deleted by commit {deleted[:12]}" in gone.note
        assert "remove the [[tool.kernelpilot.targets]] entry" in gone.note
        [broken] = records["target:models/broken.py:Broken"]
        assert broken.status == "failed" and "needs a checkpoint that is not there" in broken.note
        assert "models/broken.py" in broken.note and "fix:" in broken.note

        report = json.loads((tmp_path / "n" / "nightly.json").read_text())
        assert [row["status"] for row in report["rows"]] == ["ok", "missing", "failed"]
        table = (tmp_path / "n" / "nightly.md").read_text()
        assert "| `target:models/extra.py:Extra` | missing | — | - | - | - |" in table
        assert "  - `where: pyproject.toml: tool.kernelpilot.targets module = " in table
        junit = (tmp_path / "n" / "junit.xml").read_text()
        assert 'failures="2"' in junit and 'type="missing"' in junit
    finally:
        git(shipped.root, "reset", "--quiet", "--hard", head)


def test_a_shipped_kernel_the_machine_is_too_busy_to_time_is_not_judged(shipped, monkeypatch):
    """A real re-verification whose every timing window the judge finds busy: timed again,
    then "unjudged" with the figures, and the night does not fail for it."""
    busy = "alone: preempted 60 of 100 eager calls; other processes used 1.7 of 2 cores"
    monkeypatch.setattr(verdict, "busy_windows", lambda timings: [busy])
    [kernel] = find_shipped(shipped.root)
    config = EvalConfig(compile_baseline=False, time_budget_s=0.05, warmup=1, min_reps=3,
                        busy_retries=1)  # fmt: skip
    said: list[str] = []
    head = git(shipped.root, "rev-parse", "HEAD")
    tonight = Tonight(repo=shipped.root, device="cpu", evaluator=Evaluator(config, progress=said.append),
                      rule=RegressionConfig(), progress=said.append, seed=1,
                      base=night_fields("2026-11-27", head, "", "cpu"))  # fmt: skip
    row = kernel_row(tonight, kernel, earlier=[])
    assert row.status == row.record.status == "unjudged", row.reason
    assert not row.failed and not row.breaks_night and row.verdict is None
    assert row.record.time_ms is None and row.record.eager_ms is None  # no busy window's time
    assert row.reason.startswith(f"not judged: the machine was too busy ({busy})")
    assert row.reason.count(busy) == 2 and "worker 1:" in row.reason  # each try's figures
    assert sum("timing again in a fresh worker" in line for line in said) == 1
