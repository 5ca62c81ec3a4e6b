"""The coder: turns a grounded plan into a full candidate module.

It samples at the coder's temperature (about 0.1: a faithful implementation, not new ideas)
and writes the whole file, not a diff, so that what the harness evaluates is exactly what the
model wrote. It sees the selected kernel's children and cousins: how earlier attempts near
this one fared.
"""

from __future__ import annotations

from agents.context import ContextWindow
from agents.llm.client import Deadline, LLMClient, LLMConfig
from agents.roles.parse import parse_candidate
from agents.roles.prompting import (
    ask,
    kernel_values,
    kernels_text,
    reference_block,
    require_role,
    system_message,
    user_message,
)
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
    """A candidate implementing ``window.plan`` on ``window.selected``, or why there is none.

    ``feedback``: the failure of this role's previous reply at this step, shown to the model;
    ``deadline``: when the call must have ended (the search's wall budget).
    """
    require_role(window, "coder")
    values = {
        "reference_class": window.reference.class_name,
        "original": reference_block(window.reference),
        **kernel_values("selected", window.selected),
        "plan": data_block(window.plan.strip() or "-", "the plan"),
        "children": kernels_text(window, "children"),
        "cousins": kernels_text(window, "cousins"),
    }
    messages = [system_message(window.reference), user_message("coder", values, feedback)]
    reply = ask(client, "coder", messages, config, deadline)
    if isinstance(reply, RoleFailure):
        return reply
    parsed = parse_candidate(reply, "coder")
    if isinstance(parsed, RoleFailure):
        return parsed
    source, note = parsed
    return Draft(source=source, reply=reply, note=note)
