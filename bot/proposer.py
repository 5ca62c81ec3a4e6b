"""Which proposer a run uses, and the LLM team that proposes for one target.

``--llm auto`` (the default) uses the LLM team when an endpoint is configured (OPENAI_API_KEY
or OPENAI_BASE_URL set, or a [tool.kernelpilot.llm] table) and the offline proposer otherwise.
The settings the team is built from are ``bot.settings``'s.
"""

from __future__ import annotations

from agents.context import Reference
from agents.llm import make_client
from agents.llm.client import LLMConfig, Progress
from agents.team import Team, TeamConfig
from bot.settings import Settings
from harness.files import read_user_text
from harness.records import Problem


def run_llm(settings: Settings, asked: str, flags: dict) -> LLMConfig | None:
    """The run's LLM (None: the offline proposer alone), from --llm and the LLM flags
    (``model``, ``script``) on top of [tool.kernelpilot.llm]."""
    provider = settings.choose_llm(asked)
    return None if provider == "offline" else settings.llm_config(provider, flags)


def make_team(
    llm: LLMConfig,
    config: TeamConfig,
    problem: Problem,
    progress: Progress | None = None,
    noise_floor: float = 0.05,
) -> Team:
    """The team for one target: the client, and the reference module it works on.
    ``progress``: where the client reports each attempt, wait and failure of its calls;
    ``noise_floor``: the run's, as the roles are told it."""
    reference = Reference(
        source=read_user_text(problem.source_path, "Python file"),
        class_name=problem.class_name,
        device=problem.device,
        dtype=problem.dtype,
        atol=problem.atol,
        rtol=problem.rtol,
        noise_floor=noise_floor,
    )
    return Team(make_client(llm, progress), llm, reference, config)
