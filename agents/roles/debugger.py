"""The debugger: repairs a failed candidate from its plan and the harness's report.

It samples at the debugger's temperature (about 0.1: careful repairs) and reads the report
verbatim (the gate's reasons, the compiler's first error, the failed check), trimmed only by
the context budget's log rule (first error and tail kept). It sees the failed candidate's
siblings: other attempts from the same parent, some of which may have got right what this one
got wrong.
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


def debug(
    client: LLMClient,
    window: ContextWindow,
    config: LLMConfig,
    *,
    feedback: RoleFailure | None = None,
    deadline: Deadline | None = None,
) -> Draft | RoleFailure:
    """A repaired version of ``window.selected`` (the failed candidate), or why there is none.

    ``feedback``: the failure of this role's previous reply at this step, shown to the model;
    ``deadline``: when the call must have ended (the search's wall budget).
    """
    require_role(window, "debugger")
    values = {
        "reference_class": window.reference.class_name,
        "original": reference_block(window.reference),
        **kernel_values("failed", window.selected),
        "plan": data_block(window.plan.strip() or "-", "the plan"),
        "log": data_block(
            window.log.strip("\n") or "-", "the harness's report on the failed candidate"
        ),
        "siblings": kernels_text(window, "siblings"),
    }
    messages = [system_message(window.reference), user_message("debugger", values, feedback)]
    reply = ask(client, "debugger", messages, config, deadline)
    if isinstance(reply, RoleFailure):
        return reply
    parsed = parse_candidate(reply, "debugger")
    if isinstance(parsed, RoleFailure):
        return parsed
    source, note = parsed
    return Draft(source=source, reply=reply, note=note)
