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
from agents.roles.answer import RoleSpec, answer, read_draft
from agents.roles.prompting import kernel_values, kernels_text
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
    """A repaired version of ``window.selected`` (the failed candidate), or why there is none
    (``agents.roles.answer.answer`` says what ``feedback`` and ``deadline`` are)."""
    return answer(DEBUGGER, client, window, config, feedback=feedback, deadline=deadline)


def _values(window: ContextWindow) -> dict[str, str]:
    return {
        # Its verdict is in the harness's report below, whole: not repeated in the heading.
        **kernel_values("failed", window.selected.model_copy(update={"detail": ""})),
        "plan": data_block(window.plan.strip() or "-", "the plan"),
        "log": data_block(
            window.log.strip("\n") or "-", "the harness's report on the failed candidate"
        ),
        "siblings": kernels_text(window, "siblings"),
    }


DEBUGGER = RoleSpec("debugger", _values, read_draft)
