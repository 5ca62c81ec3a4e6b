"""One step of the agent team on a node of the tree: planner then coder on a verified node
(or the reference), the debugger on a failed one. What the roles said and how much it cost is
recorded on the new node; what the harness finds is the loop's business."""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.context import (
    KernelSummary,
    Reference,
    coder_window,
    debugger_window,
    planner_window,
)
from agents.feedback import node_feedback
from agents.llm.client import Deadline, LLMClient, LLMConfig, Reply, Role
from agents.roles import coder, debugger, planner
from agents.roles.records import Draft, Plan, RoleFailure
from agents.search.budget import Budget, Spend
from agents.search.tree import LLMCall, Node, Tree
from agents.search.view import kernel_summary, profiled_node, search_state
from agents.templates import render

REPLY_CHARS_KEPT = 20_000  # of each reply, in the trajectory


class TeamConfig(BaseModel):
    """How the roles are asked ([tool.kernelpilot.search], beside the search's own keys)."""

    model_config = {"extra": "forbid"}

    retries_per_role: int = Field(
        default=1,
        ge=0,
        description="Times a role is asked again at a step after an unusable reply.",
    )
    leaderboard: int = Field(default=3, ge=1, description="Best kernels the planner sees (top-r).")
    context_tokens: int = Field(
        default=24_000, gt=0, description="Token budget of a role's context."
    )


class Proposal(BaseModel):
    """What a step's roles produced for one new node: a source, or why there is none."""

    kind: str
    source: str = ""
    plan: str = ""
    failure: str = ""
    calls: list[LLMCall] = Field(default_factory=list)
    out_of_time: bool = Field(
        default=False, description="A call ended at the search's deadline: no time is left."
    )


class Team:
    def __init__(
        self, client: LLMClient, llm: LLMConfig, reference: Reference, config: TeamConfig
    ) -> None:
        self.client, self.llm, self.reference, self.config = client, llm, reference, config

    def propose(
        self,
        tree: Tree,
        node: Node,
        budget: Budget | None = None,
        deadline: Deadline | None = None,
    ) -> Proposal:
        """Improve a verified node (or the root); repair a failed one. With ``budget``, no
        call is made once its spend caps are reached (this step's calls counted); every call
        ends by ``deadline`` (the search's wall budget)."""
        if node.kind == "root" or node.ok:
            return self.improve(tree, node, budget, deadline)
        return self.repair(tree, node, budget, deadline)

    def improve(
        self,
        tree: Tree,
        node: Node,
        budget: Budget | None = None,
        deadline: Deadline | None = None,
    ) -> Proposal:
        proposal = Proposal(kind="improve")
        selected = self.summary(tree, node)
        search = search_state(tree, self.reference.source)
        profiled = profiled_node(tree, node)
        window = planner_window(
            self.reference,
            selected,
            profile=node_feedback(tree, profiled),
            profile_of=profiled.id,
            children=[self.summary(tree, child) for child in tree.children(node)],
            top=[self.summary(tree, best) for best in tree.leaderboard(self.config.leaderboard)],
            search=search,
            budget_tokens=self.config.context_tokens,
        )
        plan = self._ask("planner", lambda feedback: planner.plan(
            self.client, window, self.llm, feedback=feedback, deadline=deadline), proposal,
            budget)  # fmt: skip
        if isinstance(plan, Plan):
            proposal.plan = plan.text()
        elif isinstance(plan, RoleFailure) and plan.kind != "llm_call_failed":
            # Recorded as the planner's failure; the coder still works on the selected code
            # with what the planner said (models that ignore the span markers are common).
            text = plan.reply.text[:REPLY_CHARS_KEPT] if plan.reply else ""
            proposal.plan = render("plan_ungrounded", {"detail": plan.kind, "text": text})
        else:
            return proposal
        window = coder_window(
            self.reference,
            selected,
            plan=proposal.plan,
            children=window.children,
            cousins=[self.summary(tree, cousin) for cousin in tree.cousins(node)],
            search=search,
            budget_tokens=self.config.context_tokens,
        )
        draft = self._ask("coder", lambda feedback: coder.code(
            self.client, window, self.llm, feedback=feedback, deadline=deadline), proposal,
            budget)  # fmt: skip
        if isinstance(draft, Draft):
            # A candidate came of it: the planner's failure, if any, stays on its call.
            proposal.source, proposal.failure = draft.source, ""
        return proposal

    def repair(
        self,
        tree: Tree,
        node: Node,
        budget: Budget | None = None,
        deadline: Deadline | None = None,
    ) -> Proposal:
        proposal = Proposal(kind="debug", plan=node.plan)
        window = debugger_window(
            self.reference,
            self.summary(tree, node),
            plan=node.plan,
            log=failure_log(node),
            siblings=[self.summary(tree, sibling) for sibling in tree.siblings(node)],
            search=search_state(tree, self.reference.source),
            budget_tokens=self.config.context_tokens,
        )
        draft = self._ask("debugger", lambda feedback: debugger.debug(
            self.client, window, self.llm, feedback=feedback, deadline=deadline), proposal,
            budget)  # fmt: skip
        if isinstance(draft, Draft):
            proposal.source, proposal.failure = draft.source, ""
        return proposal

    def _ask(self, role: Role, call, proposal: Proposal, budget: Budget | None):
        """Ask a role, again with the reason when its reply was unusable; record every call.
        None, without a call, once ``budget``'s spend caps are reached."""
        feedback: RoleFailure | None = None
        for _ in range(1 + self.config.retries_per_role):
            if budget and (cap := budget.spend_cap(Spend.of(proposal.calls))):
                proposal.failure = f"{role}: not asked: budget reached: {cap}"
                return None
            outcome = call(feedback)
            proposal.calls.append(self._record(role, outcome))
            if not isinstance(outcome, RoleFailure):
                return outcome
            feedback = outcome
            if outcome.call is not None:  # the client already retried; the step ends here
                proposal.failure = f"{role}: {outcome.kind}: {outcome.call.error}"
                proposal.out_of_time = outcome.call.out_of_time
                break
            proposal.failure = f"{role}: {outcome.kind}: {outcome.detail}"
        return feedback

    def _record(self, role: Role, outcome: Plan | Draft | RoleFailure) -> LLMCall:
        temperature = self.llm.temperature_for(role)
        if not isinstance(outcome, RoleFailure):
            return recorded(role, temperature, outcome.reply)
        if outcome.reply is not None:  # a reply the role could not use
            error = f"{outcome.kind}: {outcome.detail}"
            return recorded(role, temperature, outcome.reply, error)
        failed = outcome.call  # the call itself failed: what it cost, in the client's words
        assert failed is not None, "a failure without a reply is the call's (roles.answer)"
        return LLMCall(role=role, temperature=temperature, text="", seconds=failed.seconds,
                       attempts=failed.attempts, error=f"{outcome.kind}: {failed.error}")  # fmt: skip

    def summary(self, tree: Tree, node: Node) -> KernelSummary:
        """A node as a role sees it (``agents.search.view``): the root is the reference."""
        return kernel_summary(tree, node, self.reference.source)


def recorded(role: Role, temperature: float | None, reply: Reply, error: str = "") -> LLMCall:
    """A call that got a reply, as the trajectory keeps it."""
    return LLMCall(
        role=role,
        temperature=temperature,
        text=reply.text[:REPLY_CHARS_KEPT],
        prompt_tokens=reply.prompt_tokens,
        completion_tokens=reply.completion_tokens,
        cached_tokens=reply.cached_tokens,
        cost_usd=reply.cost_usd,
        seconds=reply.seconds,
        attempts=reply.attempts,
        error=error,
    )


def failure_log(node: Node) -> str:
    """What the debugger reads: the verdict, the failed checks (the gate's reasons verbatim),
    and the compiler or runtime log."""
    result = node.result
    if result is None:
        return node.failure
    failed = [f"{check.name}: {check.detail}" for check in result.checks if not check.passed]
    parts = [f"status: {result.status.value}", f"reason: {result.reason}", *failed]
    if result.log:
        parts += ["log:", result.log]
    return "\n".join(parts)
