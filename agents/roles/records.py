"""What the roles return: a grounded plan, a draft candidate, or a recorded failure.

A role never raises for what the model got wrong: an unusable reply is a ``RoleFailure`` whose
``detail`` is written for the model, so the search can record it on the step and feed it back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agents.llm.client import Reply, Role
from agents.templates import render

# The planner's span markers (DESIGN.md section 4): the prompt asks for them, the parser reads
# them, and the coder sees them again in ``Plan.text()``.
BEGINS = "<<<IMPROVE BEGINS>>>"
ENDS = "<<<IMPROVE ENDS>>>"

FailureKind = Literal[
    "llm_call_failed",  # the client gave up on the call after its retries
    "empty",  # the reply has no text
    "too_long",  # the reply is over the size cap (agents.roles.parse.MAX_REPLY_CHARS)
    "truncated",  # cut off by the output limit (finish_reason "length") mid-code or mid-plan
    "no_code",  # no code block and no bare Python module
    "no_model_new",  # code, but no top-level class ModelNew
    "syntax_error",  # the chosen code block is not valid Python
    "no_plan",  # no <<<IMPROVE BEGINS>>> / <<<IMPROVE ENDS>>> span
    "unbalanced_markers",  # markers out of order or unclosed
    "span_not_found",  # a span is empty or does not occur verbatim in the selected kernel
    "no_instruction",  # a span is not followed by an instruction
]


class GroundedSpan(BaseModel):
    """One exact piece of the selected kernel to change, and how to change it."""

    code: str = Field(description="Lines copied from the selected kernel (found there verbatim).")
    instruction: str = Field(description="What to do with them, in the planner's words.")


class Plan(BaseModel):
    """The planner's grounded plan for the selected kernel."""

    spans: list[GroundedSpan] = Field(min_length=1)
    summary: str = Field(description="The planner's text before its first span (may be empty).")
    reply: Reply

    def text(self) -> str:
        """The plan as the coder and the debugger read it (``prompts/plan.md``)."""
        spans = "\n\n".join(
            render(
                "plan_span",
                {"number": str(number), "begins": BEGINS, "ends": ENDS, "code": span.code,
                 "instruction": span.instruction},
            ).strip()
            for number, span in enumerate(self.spans, 1)
        )  # fmt: skip
        return render("plan", {"summary": self.summary or "-", "spans": spans}).strip()


class Draft(BaseModel):
    """A full candidate source written by the coder or the debugger (not yet evaluated)."""

    source: str = Field(description="The candidate module, defining ModelNew.")
    reply: Reply
    note: str = Field(default="", description="The model's text outside the code, trimmed.")


class FailedCall(BaseModel):
    """A call to the model that the client gave up on, as the trajectory and the terminal show
    it."""

    error: str = Field(description="The client's words: what failed, where, what to do.")
    seconds: float = Field(ge=0, description="Wall time of the call, retries included.")
    attempts: int = Field(ge=0, description="HTTP requests made (0: none was sent).")
    out_of_time: bool = Field(
        default=False, description="The caller's deadline ended it: the search is out of time."
    )


class RoleFailure(BaseModel):
    """A role's attempt that produced nothing usable; recorded on the step and fed back."""

    role: Role
    kind: FailureKind
    detail: str = Field(description="What was wrong, written for the model to act on.")
    reply: Reply | None = Field(default=None, description="None when the call itself failed.")
    call: FailedCall | None = Field(
        default=None, description="The failed call, when the failure is the call's (no reply)."
    )
