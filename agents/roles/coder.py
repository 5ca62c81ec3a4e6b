"""The coder: turns a grounded plan into a full candidate module.

It samples at the coder's temperature (about 0.1: a faithful implementation, not new ideas)
and writes the whole file, not a diff, so that what the harness evaluates is exactly what the
model wrote. It sees the selected kernel's children and cousins: how earlier attempts near
this one fared.
"""

from __future__ import annotations

from agents.context import ContextWindow
from agents.llm.client import Deadline, LLMClient, LLMConfig
from agents.roles.answer import RoleSpec, answer, read_draft
from agents.roles.prompting import kernel_values, kernels_text
from agents.roles.records import Draft, RoleFailure
from agents.untrusted import data_block


def code(
    client: LLMClient,
    window: ContextWindow,
    config: LLMConfig,
    *,
    feedback: RoleFailure | None = None,
    deadline: Deadline | None = None,
) -> Draft | RoleFailure:
    """A candidate implementing ``window.plan`` on ``window.selected``, or why there is none
    (``agents.roles.answer.answer`` says what ``feedback`` and ``deadline`` are)."""
    return answer(CODER, client, window, config, feedback=feedback, deadline=deadline)


def _values(window: ContextWindow) -> dict[str, str]:
    return {
        **kernel_values("selected", window.selected),
        "plan": data_block(window.plan.strip() or "-", "the plan"),
        "children": kernels_text(window, "children"),
        "cousins": kernels_text(window, "cousins"),
    }


CODER = RoleSpec("coder", _values, read_draft)
