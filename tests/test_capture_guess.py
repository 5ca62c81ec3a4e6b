"""Guessed targets: a changed module that nothing in the repository builds (a training
repository's model file, with no tests, whose script needs data) is built from its constructor's
signature and called with inputs shaped for its first layer, in the capture's sandbox, and
becomes a target that says it was guessed. Tests and examples still win where they build it."""

from __future__ import annotations

import contextlib
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


class ConvBN(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int,
                 eps: float, p: float):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, stride, kernel_size // 2)
        self.norm = nn.BatchNorm2d(out_channels, eps=eps)
        self.p = p

    def forward(self, x):
        return self.norm(self.conv(x))


class Exits(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        raise SystemExit("Exits wants a dict")


class Bypassed(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.forward = lambda x: self.proj(x)  # calls go around the class's forward


@dataclass
class HugeConfig:
    width: int = 100_000


class Huge(nn.Module):
    def __init__(self, cfg: HugeConfig):
        super().__init__()
        self.proj = nn.Linear(cfg.width, cfg.width)

    def forward(self, x):
        return self.proj(x)


class Decoder(nn.Module):
    # whisper's TextDecoder, reduced: token ids and audio features, two inputs of two kinds.

    def __init__(self, n_vocab: int, n_ctx: int, n_state: int, n_layer: int):
        super().__init__()
        self.embed = nn.Embedding(n_vocab, n_state)
        self.position = nn.Parameter(torch.zeros(n_ctx, n_state))
        self.cross = nn.ModuleList([nn.Linear(n_state, n_state) for _ in range(n_layer)])

    def forward(self, x, xa, kv_cache=None):
        h = self.embed(x) + self.position[: x.shape[-1]]
        for layer in self.cross:
            h = h + layer(xa).mean(dim=1, keepdim=True)
        return h


class Encoder(nn.Module):
    # whisper's AudioEncoder, reduced: a sequence twice its context, halved by a stride.

    def __init__(self, n_mels: int, n_ctx: int, n_state: int):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positions", torch.zeros(n_ctx, n_state))

    def forward(self, x):
        x = self.conv2(torch.relu(self.conv1(x))).permute(0, 2, 1)
        assert x.shape[1:] == self.positions.shape, "incorrect audio shape"
        return x + self.positions


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x):
        return torch.relu(self.fc(x))


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x):
        return x + self.mlp(self.norm(x))
"""
CLASSES = ["Attention", "ConvBlock", "TwoConfigs", "ConvBN", "Exits", "Bypassed", "Huge", "MLP",
           "Block", "Decoder", "Encoder"]  # fmt: skip


@pytest.fixture
def recorder(tmp_path, monkeypatch) -> Recorder:
    (tmp_path / "guessnets.py").write_text(ANNOTATED)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "guessnets", raising=False)
    found = Recorder(tmp_path)
    for name in CLASSES:
        found.hook("guessnets.py", name)
    yield found
    sys.modules.pop("guessnets", None)


def found_by_class(recorder: Recorder, folder: Path) -> dict:
    return {target.class_name: target for target in recorder.targets("tests", folder)}


def test_sizes_come_from_annotations_and_names_and_failed_tries_are_not_recorded(
    recorder, tmp_path
):
    guess.guess_unseen(recorder)
    found = found_by_class(recorder, tmp_path)
    attention = found["Attention"]
    assert attention.init_args == [64, 4]  # n_state a width, n_head a head count
    # [8, 64, 64] went in first and raised: only the call that ran is recorded
    assert [call.describe() for call in attention.calls] == ["float32[8, 64]"]
    assert found["ConvBlock"].init_args == [64, 64]
    assert [call.describe() for call in found["ConvBlock"].calls] == ["float32[8, 64, 32, 32]"]
    assert (
        "'config' needs a config object, and its module defines more than one "
        "(HugeConfig, ModelConfig, TrainConfig)" in found["TwoConfigs"].problem
    )
    # A kernel is 3 wide, strides 1; eps and a probability are what layers take, not 1.0
    assert found["ConvBN"].init_args == [64, 64, 3, 1, 1e-05, 0.0]


def test_inputs_of_two_kinds_and_a_sequence_fitting_a_context_are_guessed(recorder, tmp_path):
    """A decoder's token ids and audio features each get their own kind of input; an encoder's
    sequence is tried at lengths that fit a guessed context (twice it, halved by a stride)."""
    guess.guess_unseen(recorder)
    found = found_by_class(recorder, tmp_path)
    decoder = found["Decoder"]
    assert decoder.problem == "" and decoder.init_args == [64, 64, 64, 2]  # n_layer: 2 layers
    assert [call.describe() for call in decoder.calls] == ["int64[8, 64], float32[8, 64, 64]"]
    encoder = found["Encoder"]
    assert encoder.problem == "" and encoder.init_args == [64, 64, 64]
    assert [call.describe() for call in encoder.calls] == ["float32[8, 64, 128]"]


def test_what_the_repositorys_code_raises_in_a_guess_is_said_and_the_rest_go_on(recorder, tmp_path):
    guess.guess_unseen(recorder)
    found = found_by_class(recorder, tmp_path)
    assert "SystemExit: Exits wants a dict" in found["Exits"].problem
    assert "its forward ran, but not through Bypassed.forward" in found["Bypassed"].problem
    assert "would hold 10,000,100,000 parameter and buffer values" in found["Huge"].problem
    assert not recorder.instances["guessnets.py:Huge"]  # its build on meta is not recorded
    assert found["MLP"].calls and found["Block"].calls  # guessed after those failed


def test_a_call_the_repository_made_wins_over_one_inside_a_guess(recorder, tmp_path):
    import guessnets

    guessnets.MLP(16)(torch.randn(2, 16))  # as a test would: MLP seen for real, Block not
    guess.guess_unseen(recorder)  # Block is guessed: its MLP is called at [8, 64, 64] inside it
    found = found_by_class(recorder, tmp_path)
    assert found["Block"].guessed
    mlp = found["MLP"]
    assert not mlp.guessed and mlp.init_args == [16]
    assert [call.describe() for call in mlp.calls] == ["float32[2, 16]"]


def test_a_module_built_but_never_called_is_called_with_guessed_inputs(recorder, tmp_path):
    import guessnets

    built = guessnets.MLP(16)  # noqa: F841 - alive, as a test's fixture keeps it
    guess.guess_unseen(recorder)
    mlp = found_by_class(recorder, tmp_path)["MLP"]
    assert mlp.guessed and mlp.init_args == [16]  # its own constructor's arguments, kept
    assert mlp.source == "tests"  # built by the repository's code, not by the guess
    assert [call.describe() for call in mlp.calls] == ["float32[8, 64, 16]"]


def test_a_call_still_running_when_the_report_is_made_is_reported(recorder, tmp_path):
    """The worker reports from its timer while the repository's code may be inside a forward
    (a long generation loop): that call is what there is to report."""
    import guessnets

    mlp, seen = guessnets.MLP(16), []
    inner = mlp.fc.forward
    mlp.fc.forward = lambda x: (seen.append(found_by_class(recorder, tmp_path)), inner(x))[1]
    mlp(torch.randn(3, 16))
    assert [call.describe() for call in seen[0]["MLP"].calls] == ["float32[3, 16]"]


def test_a_forward_that_no_guess_fits_says_the_last_failure():
    class Picky(torch.nn.Module):
        def forward(self, x):
            raise ValueError("wants a dict of tensors")

    with pytest.raises(guess.NoGuess, match="the last: ValueError: wants a dict of tensors"):
        guess.call(guess.build(Picky, contextlib.nullcontext))


def _pull(tmp_path: Path, pyproject: str | None = None) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(REPO, repo)
    if pyproject is not None:
        (repo / "pyproject.toml").write_text(pyproject)
    init(repo)
    commit(repo, {}, "base")
    git(repo, "checkout", "--quiet", "-b", "change")
    model = (repo / "model.py").read_text()
    changed = model.replace("x = self.c_fc(x)\n", "x = self.c_fc(x) * 0.5\n").replace(
        "/ self.temperature", "/ (2 * self.temperature)"
    )
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
    # No guess either: what to name, and the script to start from, as without guessing
    assert (
        "model.py:Distiller  no target: no guess: no value to guess for its constructor's "
        "parameter 'teacher'; no test file imports it and no Markdown example names it: name "
        'a command in [tool.kernelpilot.capture], e.g. command = "python train.py ..."'
        in listed.output
    )
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
