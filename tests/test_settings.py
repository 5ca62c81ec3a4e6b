"""The project's settings (bot.settings): read once per run, each section typed for the layer
that reads it, the run's flags on top, a bad or unknown key named with its file."""

from __future__ import annotations

import json
import random

import pytest
from click.testing import CliRunner

import harness.config
from agents.optimize import Attempt
from agents.search.config import SearchConfig
from agents.search.strategy import make_strategy
from bot.cli import main
from bot.settings import Settings, load_settings, settings_from_table
from harness.errors import UserError
from tests.conftest import FIXTURES


def test_auto_uses_the_team_only_when_an_endpoint_is_configured(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert Settings().choose_llm("auto") == "offline"
    with_table = settings_from_table({"llm": {"model": "qwen"}}, "pyproject.toml")
    assert with_table.choose_llm("auto") == "openai"  # a [tool.kernelpilot.llm] table
    scripted = settings_from_table({"llm": {"provider": "scripted"}}, "pyproject.toml")
    assert scripted.choose_llm("auto") == "scripted"  # its script may come from --script
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert Settings().choose_llm("auto") == "openai"
    assert Settings().choose_llm("offline") == "offline"  # asked for: as asked


def test_settings_come_from_the_project_and_flags_win(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[tool.kernelpilot.llm]\nmodel = "qwen2.5-coder"\n'
        '[tool.kernelpilot.search]\nattempts = 12\nstrategy = "greedy"\n'
    )
    settings = load_settings(tmp_path)
    assert settings.llm_config("openai", {}).model == "qwen2.5-coder"
    assert settings.llm_config("openai", {"model": "gpt-4.1-mini"}).model == "gpt-4.1-mini"
    search = settings.search_config({"attempts": 3, "max_cost_usd": None})
    assert search.attempts == 3 and search.strategy == "greedy"
    assert search.max_cost_usd == SearchConfig().max_cost_usd  # a flag not given: the default


def test_a_bad_setting_names_its_file_and_key(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[tool.kernelpilot.search]\nstrategy = "annealing"\n'
    )
    with pytest.raises(UserError) as caught:
        load_settings(tmp_path)
    assert caught.value.where == f"{tmp_path / 'pyproject.toml'}: tool.kernelpilot.search.strategy"
    assert "README's configuration section" in caught.value.fix


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ({"colour": "red"}, "tool.kernelpilot.colour"),
        ({"eval": {"seed": 5}}, "tool.kernelpilot.eval.seed"),
        ({"llm": {"modle": "x"}}, "tool.kernelpilot.llm.modle"),
        ({"search": {"leaderbord": 2}}, "tool.kernelpilot.search.leaderbord"),
        ({"nightly": {"windows": 3}}, "tool.kernelpilot.nightly.windows"),
        ({"targets": [{"module": "m.py:M", "inptus": []}]}, "tool.kernelpilot.targets.0.inptus"),
    ],
)
def test_an_unknown_key_in_any_section_is_an_error_naming_it(table, key):
    with pytest.raises(UserError) as caught:
        settings_from_table(table, "pyproject.toml")
    assert caught.value.where == f"pyproject.toml: {key}"
    assert "Extra inputs are not permitted" in caught.value.what


def test_the_search_table_holds_the_teams_knobs_and_the_strategys(tmp_path):
    settings = settings_from_table(
        {"search": {"leaderboard": 5, "context_tokens": 9000, "retries_per_role": 0,
                    "root_children": 2, "prune_after": 4, "width": 2}},
        "pyproject.toml",
    )  # fmt: skip
    assert (settings.team.leaderboard, settings.team.context_tokens) == (5, 9000)
    assert settings.team.retries_per_role == 0
    search = settings.search_config({})
    assert (search.root_children, search.prune_after, search.width) == (2, 4, 2)
    strategy = make_strategy(search, random.Random(0))
    assert (strategy.root_children, strategy.prune_after) == (2, 4)  # type: ignore[attr-defined]


PROJECT = """\
[tool.kernelpilot]
device = "cpu"
[[tool.kernelpilot.targets]]
module = "scale.py:Model"
[tool.kernelpilot.search]
leaderboard = 5
context_tokens = 9000
root_children = 2
prune_after = 4
attempts = 7
"""


@pytest.fixture
def optimize_once(tmp_path, monkeypatch):
    """``kernelpilot optimize`` in a project folder with the scripted LLM, its search replaced
    by a recorder: what reached the search, and how often a pyproject.toml was read."""
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    (tmp_path / "scale.py").write_text((FIXTURES / "scale_problem.py").read_text())
    (tmp_path / "replies.json").write_text(json.dumps([]))
    monkeypatch.chdir(tmp_path)
    reads: list = []
    read_toml = harness.config.read_toml

    def counting(path):
        reads.append(path)
        return read_toml(path)

    seen: dict = {}

    def recording(problem, evaluator, team, config, *args, **kwargs):
        seen.update(team=team, search=config)
        return Attempt(problem=problem, reason="recorded, not searched")

    monkeypatch.setattr(harness.config, "read_toml", counting)
    monkeypatch.setattr("agents.optimize.optimize_problem", recording)
    result = CliRunner().invoke(
        main,
        ["optimize", "--llm", "scripted", "--script", "replies.json", "--out", "out",
         "--budget", "3"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return seen, reads


def test_one_optimize_run_reads_pyproject_once(optimize_once):
    _, reads = optimize_once
    assert [path.name for path in reads] == ["pyproject.toml"]


def test_the_team_and_search_settings_reach_the_search(optimize_once):
    seen, _ = optimize_once
    assert (seen["team"].config.leaderboard, seen["team"].config.context_tokens) == (5, 9000)
    search = seen["search"]
    assert (search.root_children, search.prune_after) == (2, 4)
    assert search.attempts == 3  # --budget wins over the file's 7
