"""The one path every role takes: its prompt rendered, one call to the model, and the reply
read into the role's record or a recorded ``RoleFailure``.

A role is data here (``RoleSpec``): its name, the template values it adds to the reference's,
and how its reply is read. Asking again after an unusable reply is the team's business
(``agents.team``): the failure returned here is what it feeds back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from pydantic import BaseModel

from agents.context import ContextWindow
from agents.llm.client import (
    Deadline,
    LLMCallFailed,
    LLMClient,
    LLMConfig,
    LLMDeadlineReached,
    Message,
    Reply,
    Role,
)
from agents.roles.parse import failure, parse_candidate
from agents.roles.prompting import shared_values, system_message, user_message
from agents.roles.records import Draft, FailedCall, RoleFailure
from agents.untrusted import data_block

RecordT = TypeVar("RecordT", bound=BaseModel)


@dataclass(frozen=True)
class RoleSpec(Generic[RecordT]):
    """What makes a role itself; the rest of its path (``answer``) is the same for all three."""

    role: Role
    values: Callable[[ContextWindow], dict[str, str]]  # its prompt's values beyond the reference
    read: Callable[[Reply, ContextWindow], RecordT | RoleFailure]  # the reply into its record


def answer(
    spec: RoleSpec[RecordT],
    client: LLMClient,
    window: ContextWindow,
    config: LLMConfig,
    *,
    feedback: RoleFailure | None = None,
    deadline: Deadline | None = None,
) -> RecordT | RoleFailure:
    """The role's record from one call to the model, or the recorded reason there is none.

    ``feedback``: the failure of this role's previous reply at this step, shown to the model;
    ``deadline``: when the call must have ended (the search's wall budget).
    """
    require_role(window, spec.role)
    values = {**shared_values(window), **spec.values(window)}
    messages = [system_message(window.reference), user_message(spec.role, values, feedback)]
    reply = ask(client, spec.role, messages, config, deadline)
    if isinstance(reply, RoleFailure):
        return reply
    return spec.read(reply, window)


def read_draft(reply: Reply, window: ContextWindow) -> Draft | RoleFailure:
    """How the coder and the debugger read a reply: the candidate module and the prose."""
    parsed = parse_candidate(reply, window.role)
    if isinstance(parsed, RoleFailure):
        return parsed
    source, note = parsed
    return Draft(source=source, reply=reply, note=note)


def ask(
    client: LLMClient,
    role: Role,
    messages: list[Message],
    config: LLMConfig,
    deadline: Deadline | None = None,
) -> Reply | RoleFailure:
    """One call at the role's temperature, ended by ``deadline``; a call that failed after
    retries is a failure, which keeps the client's words and what the call cost.

    ``LLMFatalError`` is not caught: nothing later in the run could succeed.
    """
    try:
        return client.complete(
            messages,
            temperature=config.temperature_for(role),
            max_tokens=config.max_output_tokens,
            deadline=deadline,
            role=role,
        )
    except LLMCallFailed as err:
        failed = failure(role, "llm_call_failed", None, error=data_block(str(err), "the error"))
        failed.call = FailedCall(
            error=str(err),
            seconds=err.seconds,
            attempts=err.attempts,
            out_of_time=isinstance(err, LLMDeadlineReached),
        )
        return failed


def require_role(window: ContextWindow, role: Role) -> None:
    """A window built for another role is our own bug: it lacks what this role needs."""
    if window.role != role:
        raise ValueError(f"the {role} was given a context window built for the {window.role}")
