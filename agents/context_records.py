"""What a role's context window holds: the reference and the setting it is judged in, the
kernels it is shown, and the search so far. Plain data (no tree objects), built from the tree
by ``agents.search.view`` and rendered by ``agents.roles.prompting``; ``agents.context``
re-exports them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from agents.search.tree import Baseline
from harness.machine import Machine
from harness.records import Verdict


class KernelSummary(BaseModel):
    """A node of the search tree as a role sees it.

    Speedups are the search's one baseline over the kernel's median (``Tree.baseline``), so
    every kernel of a prompt is compared with the same eager time and speedups rank as medians
    do; ``vs_eager`` and ``vs_compile`` are the judgement of the kernel's own run (its speedup
    beside the baseline timed with it, its noise floor, faster or not).
    """

    node_id: str
    code: str = Field(
        description="The candidate's source (the root: the reference's); empty: none. As shown: "
        "a unified diff when ``shown`` is 'diff', empty when 'listed'."
    )
    status: str = Field(description="EvalResult status ('ok', 'build_error', ...) or 'pending'.")
    median_ms: float | None = Field(default=None, description="Its median time per call.")
    min_ms: float | None = Field(default=None, description="Its fastest call.")
    speedup_vs_eager: float | None = Field(
        default=None, description="The search's eager baseline over its median."
    )
    speedup_vs_compile: float | None = Field(
        default=None, description="The search's torch.compile baseline over its median."
    )
    vs_eager: Verdict | None = Field(default=None, description="Its own run's verdict.")
    vs_compile: Verdict | None = Field(default=None, description="Its own run's verdict.")
    best_id: str = Field(default="", description="The best kernel, where this one is not it.")
    vs_best: Verdict | None = Field(
        default=None,
        description="Its time against the best kernel's, within the noise of both runs' "
        "spreads or beyond it (harness.judge.accept): whether two kernels really differ.",
    )
    detail: str = Field(default="", description="Why it failed (empty when verified).")
    shown: Literal["code", "diff", "listed"] = Field(
        default="code",
        description="How the prompt shows its code: whole, as a diff against kernel ``base``, "
        "or not again (listed earlier in the prompt).",
    )
    base: str = Field(default="", description="The kernel its diff is against, or its listing.")


class Reference(BaseModel):
    """The module being optimized, shown to every role, and the setting it is judged in."""

    source: str = Field(description="The reference module's source (the original).")
    class_name: str = Field(default="Model", description="The reference class in that source.")
    device: str = Field(description="'cpu' or 'cuda'.")
    dtype: str = Field(default="float32", description="The problem's dtype.")
    atol: float | None = Field(default=None, description="The problem's atol override, if any.")
    rtol: float | None = Field(default=None, description="The problem's rtol override, if any.")
    noise_floor: float = Field(
        default=0.05, ge=0, description="The run's configured noise floor (eval.noise_floor)."
    )
    machine: Machine | None = Field(
        default=None,
        description="The machine kernels are timed on; None: this machine, described when a "
        "prompt is first made (``agents.search.view.machine_for``).",
    )

    @field_validator("class_name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        # Shown outside the data blocks: only a class name that Python could have loaded.
        if not name.isidentifier():
            raise ValueError(f"reference class name {name[:80]!r} is not a Python identifier")
        return name


class FailedAttempt(BaseModel):
    """An attempt that made no verified kernel, in one line: kept in every later prompt so the
    model learns from it whatever part of the tree it works on."""

    node_id: str
    kind: str = Field(description="improve, debug or offline.")
    parent: str
    stage: str = Field(description="Where it failed: the status, and the failed check if any.")
    reason: str = Field(description="The verdict's first line, shortened.")


class SearchState(BaseModel):
    """The search so far, the same in every role's prompt of one step."""

    baseline: Baseline = Field(default_factory=Baseline)
    best: KernelSummary | None = Field(default=None, description="The fastest verified kernel.")
    failures: list[FailedAttempt] = Field(default_factory=list, description="Oldest first.")
    failures_omitted: int = Field(default=0, description="Earlier failures not listed.")
