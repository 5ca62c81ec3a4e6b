"""Per-role context windows, rebuilt at every step and trimmed to a token budget.

What each role sees (DESIGN.md section 4), besides the reference module, the setting it is
judged in (machine, tolerance) and the search so far (one baseline, the best kernel, every
failed attempt in one line):

- planner: the selected kernel, profiling feedback, the node's children, the global top-r;
- coder: the plan, the selected kernel, the node's children and cousins;
- debugger: the failed candidate, the plan, its build/runtime/verification log, its siblings.

Each kernel's code is shown once per window (``agents.listing``): a kernel listed again is
referred to, and one mostly made of code already shown is listed as a diff against it.

Budget. The budget covers the window's texts, not the fixed prompt around them (contract,
example, instructions); tokens are estimated and texts trimmed by ``agents.trim``. The code a
role edits (the selected kernel; the failed candidate) and the plan are never trimmed: the
reply must reproduce them; nor are the failed attempts' lines (a few, each short). The other
parts share what is left, in a fixed order and share per
role; a part that needs less than its share passes the rest on.

Secrets: every text of a window is scrubbed (``harness.sandbox.redact``) before it is trimmed, so a cut
cannot leave a key's head too short to be recognised. The roles then put the texts into data
blocks (``agents.untrusted``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from agents.context_records import FailedAttempt, KernelSummary, Reference, SearchState
from agents.listing import ShownCode
from agents.trim import estimate_tokens, trim_code, trim_log
from harness.sandbox.redact import scrub_record

__all__ = [  # the records live in agents.context_records; callers import them from here too
    "ContextWindow", "FailedAttempt", "KernelSummary", "Reference", "SearchState",
    "coder_window", "debugger_window", "planner_window",
]  # fmt: skip

Role = Literal["planner", "coder", "debugger"]
DEFAULT_BUDGET_TOKENS = 24_000
KERNEL_MIN_TOKENS = 500  # below this a neighbour's code says nothing: drop the neighbour instead
DETAIL_SHARE = 0.25  # of a neighbour's allowance, for its status detail (the rest for its code)
# Order and share of the trimmable parts, per role (the pinned parts come off the top first).
SHARES: dict[Role, list[tuple[str, float]]] = {
    "planner": [("original", 0.30), ("profile", 0.20), ("children", 0.25), ("top", 0.25)],
    "coder": [("original", 0.40), ("children", 0.30), ("cousins", 0.30)],
    "debugger": [("log", 0.45), ("original", 0.30), ("siblings", 0.25)],
}


class ContextWindow(BaseModel):
    """What one role sees at one step, already trimmed to its budget."""

    role: Role
    reference: Reference
    selected: KernelSummary = Field(description="The code being worked on (debugger: the failure).")
    plan: str = ""
    profile: str = ""
    log: str = ""
    profile_of: str = Field(default="", description="The kernel the profile describes.")
    search: SearchState = Field(default_factory=SearchState)
    children: list[KernelSummary] = Field(default_factory=list)
    top: list[KernelSummary] = Field(default_factory=list)
    cousins: list[KernelSummary] = Field(default_factory=list)
    siblings: list[KernelSummary] = Field(default_factory=list)
    omitted: dict[str, int] = Field(
        default_factory=dict, description="Per group, how many kernels did not fit the budget."
    )
    budget_tokens: int
    cuts: list[str] = Field(default_factory=list, description="What was trimmed, for the record.")

    def tokens(self) -> int:
        """Estimated tokens of the window's texts (what the budget bounds)."""
        texts = [self.reference.source, self.selected.code, self.selected.detail, self.plan]
        texts += [self.profile, self.log]
        texts += [failure.reason for failure in self.search.failures]
        for group in (self.children, self.top, self.cousins, self.siblings):
            texts += [text for kernel in group for text in (kernel.code, kernel.detail)]
        return sum(estimate_tokens(text) for text in texts)


def planner_window(
    reference: Reference,
    selected: KernelSummary,
    *,
    profile: str,
    children: list[KernelSummary],
    top: list[KernelSummary],
    profile_of: str = "",
    search: SearchState | None = None,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
) -> ContextWindow:
    """The planner's view: ``top`` best first, as the leaderboard orders it; ``profile``
    describes kernel ``profile_of`` (the selected one, or for the reference the best)."""
    window = ContextWindow(
        role="planner", reference=reference, selected=selected, profile=profile,
        profile_of=profile_of, children=children, top=top, search=search or SearchState(),
        budget_tokens=budget_tokens,
    )  # fmt: skip
    return _fit(window)


def coder_window(
    reference: Reference,
    selected: KernelSummary,
    *,
    plan: str,
    children: list[KernelSummary],
    cousins: list[KernelSummary],
    search: SearchState | None = None,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
) -> ContextWindow:
    """The coder's view: ``plan`` is the planner's grounded plan as text."""
    window = ContextWindow(
        role="coder", reference=reference, selected=selected, plan=plan, children=children,
        cousins=cousins, search=search or SearchState(), budget_tokens=budget_tokens,
    )  # fmt: skip
    return _fit(window)


def debugger_window(
    reference: Reference,
    failed: KernelSummary,
    *,
    plan: str,
    log: str,
    siblings: list[KernelSummary],
    search: SearchState | None = None,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
) -> ContextWindow:
    """The debugger's view: ``log`` holds the gate's reasons or the build/runtime output."""
    window = ContextWindow(
        role="debugger", reference=reference, selected=failed, plan=plan, log=log,
        siblings=siblings, search=search or SearchState(), budget_tokens=budget_tokens,
    )  # fmt: skip
    return _fit(window)


def _fit(window: ContextWindow) -> ContextWindow:
    """Trim the window's parts to its budget by the role's shares (module docstring)."""
    window = scrub_record(window)
    pinned = estimate_tokens(window.selected.code) + estimate_tokens(window.plan)
    pinned += sum(estimate_tokens(failure.reason) for failure in window.search.failures)
    detail = trim_log(window.selected.detail, max(window.budget_tokens // 20, 50))
    available = max(0, window.budget_tokens - pinned - estimate_tokens(detail))
    cuts = [] if available else [f"the code being edited and the plan use {pinned} tokens"]
    omitted: dict[str, int] = {}
    updates: dict[str, object] = {"selected": window.selected.model_copy(update={"detail": detail})}
    carry = 0
    shown = ShownCode(window.selected)  # each kernel's code once (agents.listing)
    for part, share in SHARES[window.role]:
        allowance = int(available * share) + carry
        if part == "original":
            text = trim_code(window.reference.source, allowance)
            updates["reference"] = window.reference.model_copy(update={"source": text})
            used, before = estimate_tokens(text), window.reference.source
        elif part in ("profile", "log"):
            text = trim_log(getattr(window, part), allowance)
            updates[part] = text
            used, before = estimate_tokens(text), getattr(window, part)
        else:
            kernels: list[KernelSummary] = getattr(window, part)
            kept, used = _fit_kernels(kernels, allowance, shown)
            updates[part] = kept
            if dropped := len(kernels) - len(kept):
                omitted[part] = dropped
                cuts.append(f"{part}: {dropped} of {len(kernels)} kernels left out")
            text = before = ""
        if text != before:
            cuts.append(f"{part}: {len(before)} characters trimmed to {len(text)}")
        carry = max(0, allowance - used)
    return window.model_copy(update={**updates, "cuts": cuts, "omitted": omitted})


def _fit_kernels(
    kernels: list[KernelSummary], allowance: int, shown: ShownCode
) -> tuple[list[KernelSummary], int]:
    """As many of ``kernels`` as fit, in order, each as ``shown`` shows it (whole, a diff, or
    a reference to its earlier listing) and trimmed to an equal part of ``allowance``. Only a
    kernel that is kept becomes a base for later diffs: a diff never points at code the
    window left out."""
    if not kernels:
        return [], 0
    each = max(allowance // len(kernels), KERNEL_MIN_TOKENS)
    kept: list[KernelSummary] = []
    used = 0
    for kernel in kernels:
        listed = shown.show(kernel)
        detail = trim_log(listed.detail, int(each * DETAIL_SHARE))
        code = trim_code(listed.code, each - estimate_tokens(detail))
        cost = estimate_tokens(detail) + estimate_tokens(code)
        if used + cost > allowance:
            break
        shown.keep(kernel, listed)
        kept.append(listed.model_copy(update={"detail": detail, "code": code}))
        used += cost
    return kept, used
