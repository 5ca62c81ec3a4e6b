"""The planner: reads the selected kernel and its feedback, writes a grounded plan.

It samples at the planner's temperature (about 0.8: diverse ideas across steps) and marks the
exact code to change, so the coder works from the kernel's own lines rather than from a
paraphrase. A span that is not in the selected kernel makes the whole plan a failure: a plan
half grounded would have the coder guess where the rest goes.
"""

from __future__ import annotations

from agents.context import ContextWindow
from agents.llm.client import Deadline, LLMClient, LLMConfig, Reply
from agents.roles.answer import RoleSpec, answer
from agents.roles.parse import BEGINS, ENDS, parse_plan
from agents.roles.prompting import kernel_values, kernels_text
from agents.roles.records import Plan, RoleFailure
from agents.roles.view_text import profile_label, view
from agents.untrusted import data_block


def plan(
    client: LLMClient,
    window: ContextWindow,
    config: LLMConfig,
    *,
    feedback: RoleFailure | None = None,
    deadline: Deadline | None = None,
) -> Plan | RoleFailure:
    """A grounded plan for ``window.selected``, or the recorded reason there is none
    (``agents.roles.answer.answer`` says what ``feedback`` and ``deadline`` are)."""
    return answer(PLANNER, client, window, config, feedback=feedback, deadline=deadline)


def _values(window: ContextWindow) -> dict[str, str]:
    return {
        **kernel_values("selected", window.selected),
        "profile_label": profile_label(window),
        "profile": data_block(window.profile.strip(), "profiling feedback")
        if window.profile.strip()
        else view("profile_none"),
        "children": kernels_text(window, "children"),
        "top": kernels_text(window, "top"),
        "device": window.reference.device,
        "begins": BEGINS,
        "ends": ENDS,
    }


def _read(reply: Reply, window: ContextWindow) -> Plan | RoleFailure:
    parsed = parse_plan(reply, window.selected.code)
    if isinstance(parsed, RoleFailure):
        return parsed
    spans, summary = parsed
    return Plan(spans=spans, summary=summary, reply=reply)


PLANNER = RoleSpec("planner", _values, _read)
