"""Guessed targets: a changed module that nothing in the repository builds (a training
repository's model file, with no tests, whose script needs data) is built from its constructor's
signature and called with inputs shaped for its first layer, in the capture's sandbox, and
becomes a target that says it was guessed. Tests and examples still win where they build it."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from bot.cli import main
from harness.capture import guess
from harness.capture.hooks import Recorder
from harness.capture.run import capture
from tests.conftest import FIXTURES, fast_config
from tests.gitrepo import commit, git, init

REPO = FIXTURES / "guess_repo"
CONFIG = "[GPTConfig(block_size=64, vocab_size=100, n_layer=2, n_head=4, n_embd=32)]"


@pytest.fixture(scope="module")
def guessed():
    classes = [("model.py", name) for name in ("MLP", "GPT", "CausalSelfAttention", "Distiller")]
    report, _ = capture(REPO, classes, fast_config(), limit_s=120, guess=True)
    return report, {target.class_name: target for target in report.targets}


def test_modules_nothing_builds_are_built_from_their_config_and_called(guessed):
    report, found = guessed
    assert report.ran == "guesses"
    mlp = found["MLP"]
    assert mlp.problem == "" and mlp.guessed and mlp.init_expression == CONFIG
    assert [call.describe() for call in mlp.calls] == ["float32[8, 64, 32]"]  # its c_fc's width
    ids = found["GPT"].calls[0].args[0].tensor
    assert ids.dtype == "int64" and ids.shape == [8, 64] and 0 <= ids.low and ids.high < 100
    # Built inside another guess (Block's attention, by GPT): guessed too, with where it was built
    attention = found["CausalSelfAttention"]
    assert attention.guessed and attention.built_at.startswith("model.py:")


def test_a_constructor_with_nothing_to_guess_from_is_said(guessed):
    _, found = guessed
    distiller = found["Distiller"]
    assert not distiller.calls
    assert "no value to guess for its constructor's parameter 'teacher'" in distiller.problem


def test_tests_that_build_a_module_win_over_a_guess():
    classes = [("model.py", "MLP"), ("model.py", "Unused")]
    report, _ = capture(
        FIXTURES / "capture_repo", classes, fast_config(), tests=["tests/test_model.py"],
        limit_s=120, guess=True,
    )  # fmt: skip
    mlp, unused = report.targets
    assert not mlp.guessed and mlp.built_at == "tests/test_model.py:7"
    assert unused.guessed and [call.describe() for call in unused.calls] == ["float32[8, 64, 64]"]


ANNOTATED = """
from dataclasses import dataclass

import torch
from torch import nn


class Attention(nn.Module):
    def __init__(self, n_state: int, n_head: int, dropout: float = 0.1):
        super().__init__()
        assert n_state % n_head == 0
        self.query = nn.Linear(n_state, n_state)

    def forward(self, x, mask=None):
        if x.dim() != 2:
            raise ValueError("(batch, features) only")
        return self.query(x)


class ConvBlock(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


@dataclass
class ModelConfig:
    width: int = 8


@dataclass
class TrainConfig:
    steps: int = 2


class TwoConfigs(nn.Module):
    def __init__(self, config):
        super().__init__()
"""


@pytest.fixture
def recorder(tmp_path, monkeypatch) -> Recorder:
    (tmp_path / "guessnets.py").write_text(ANNOTATED)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "guessnets", raising=False)
    found = Recorder(tmp_path)
    for name in ("Attention", "ConvBlock", "TwoConfigs"):
        found.hook("guessnets.py", name)
    yield found
    sys.modules.pop("guessnets", None)


def test_sizes_come_from_annotations_and_names_and_failed_tries_are_not_recorded(
    recorder, tmp_path
):
    recorder.guess_unseen()
    found = {target.class_name: target for target in recorder.targets("", tmp_path)}
    attention = found["Attention"]
    assert attention.init_args == [64, 4]  # n_state a width, n_head a head count
    # [8, 64, 64] went in first and raised: only the call that ran is recorded
    assert [call.describe() for call in attention.calls] == ["float32[8, 64]"]
    assert found["ConvBlock"].init_args == [64, 64]
    assert [call.describe() for call in found["ConvBlock"].calls] == ["float32[8, 64, 32, 32]"]
    assert (
        "'config' needs a config object, and its module defines more than one "
        "(ModelConfig, TrainConfig)" in found["TwoConfigs"].problem
    )


def test_a_forward_that_no_guess_fits_says_the_last_failure():
    class Picky(torch.nn.Module):
        def forward(self, x):
            raise ValueError("wants a dict of tensors")

    with pytest.raises(guess.NoGuess, match="the last: ValueError: wants a dict of tensors"):
        guess.call(guess.build(Picky))


def _pull(tmp_path: Path, pyproject: str | None = None) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo)
    if pyproject is not None:
        (repo / "pyproject.toml").write_text(pyproject)
    init(repo)
    commit(repo, {}, "base")
    git(repo, "checkout", "--quiet", "-b", "change")
    model = (repo / "model.py").read_text()
    changed = model.replace("x = self.c_fc(x)\n", "x = self.c_fc(x) * 0.5\n")
    commit(repo, {"model.py": changed}, "halve the MLP's input")
    return repo


def targets(repo: Path, *more: str):
    return CliRunner().invoke(
        main, ["targets", "--base", "main", "--repo", str(repo), "--device", "cpu", *more]
    )


def test_a_pull_request_to_a_repository_without_tests_gets_a_guessed_target(tmp_path):
    repo = _pull(tmp_path)
    listed = targets(repo)
    assert listed.exit_code == 0, listed.output
    assert f"model.py:MLP  guessed: built with {CONFIG}, called with float32[8, 64, 32]" in (
        listed.output
    )
    assert "check the sizes (--write freezes them into pyproject.toml to edit)" in listed.output
    written = targets(repo, "--write")
    assert written.exit_code == 0, written.output
    assert "GPTConfig(block_size=64" in (repo / "kernelpilot_targets.py").read_text()
    assert "# seen in kernelpilot's guess" in (repo / "pyproject.toml").read_text()


def test_guessing_turned_off_names_a_command_to_write(tmp_path):
    repo = _pull(tmp_path, "[tool.kernelpilot.capture]\nguess = false\n")
    listed = targets(repo)
    assert listed.exit_code == 0, listed.output
    assert "guessed" not in listed.output
    assert "no test file imports it and no Markdown example names it: name a command" in (
        listed.output
    )
    assert 'e.g. command = "python train.py ..."' in listed.output
