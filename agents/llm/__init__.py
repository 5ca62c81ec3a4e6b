"""LLM access: the client interface, the openai-backed client and the scripted one.

``make_client(config)`` is the one place that picks the implementation; everything else holds an
``LLMClient``. ``OpenAIChatClient`` lives in ``agents.llm.openai_client`` and is imported only
when asked for, so scripted runs and tests do not pay for importing ``openai``.
"""

from __future__ import annotations

from agents.llm.client import (
    Deadline,
    LLMCallFailed,
    LLMClient,
    LLMConfig,
    LLMDeadlineReached,
    LLMFatalError,
    Message,
    Progress,
    Reply,
    Role,
    RoleTemperatures,
)
from agents.llm.prices import DEFAULT_PRICES, ModelPrice
from agents.llm.scripted import ScriptedClient, ScriptedReply

__all__ = [
    "DEFAULT_PRICES",
    "Deadline",
    "LLMCallFailed",
    "LLMClient",
    "LLMConfig",
    "LLMDeadlineReached",
    "LLMFatalError",
    "Message",
    "ModelPrice",
    "Progress",
    "Reply",
    "Role",
    "RoleTemperatures",
    "ScriptedClient",
    "ScriptedReply",
    "make_client",
]


def make_client(config: LLMConfig, progress: Progress | None = None) -> LLMClient:
    """The client ``config`` names: the scripted replay or an OpenAI-compatible endpoint
    (``progress``: where it reports each attempt, each wait and each failure)."""
    if config.provider == "scripted":
        assert config.script is not None  # LLMConfig's validator requires it
        return ScriptedClient.from_file(config.script)
    from agents.llm.openai_client import OpenAIChatClient

    return OpenAIChatClient(config, progress)
