"""Which proposer a run uses, and the LLM and search settings as a user writes them."""

from __future__ import annotations

import pytest

from bot.team import choose_llm, llm_config, search_config
from harness.errors import UserError


def test_auto_uses_the_team_only_when_an_endpoint_is_configured(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert choose_llm("auto", {}) == "offline"
    assert choose_llm("auto", {"model": "qwen"}) == "openai"  # a [tool.kernelpilot.llm] table
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert choose_llm("auto", {}) == "openai"
    assert choose_llm("offline", {}) == "offline"  # asked for: as asked


def test_settings_come_from_the_project_and_flags_win(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[tool.kernelpilot.llm]\nmodel = "qwen2.5-coder"\n'
        '[tool.kernelpilot.search]\nattempts = 12\nstrategy = "greedy"\n'
    )
    monkeypatch.chdir(tmp_path)
    assert llm_config("openai", {}).model == "qwen2.5-coder"
    assert llm_config("openai", {"model": "gpt-4.1-mini"}).model == "gpt-4.1-mini"
    search = search_config({"attempts": 3, "max_cost_usd": None})
    assert search.attempts == 3 and search.strategy == "greedy"


def test_a_bad_setting_names_its_key(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[tool.kernelpilot.search]\nstrategy = "annealing"\n'
    )
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as caught:
        search_config({})
    assert "tool.kernelpilot.search.strategy" in caught.value.where
