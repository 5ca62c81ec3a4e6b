"""The search tree: the reference at the root, every attempt a node under the one it grew from.

A node's score is its kernel's median time (lower is better); a node whose candidate failed
(or whose role failed to produce one) scores +inf. The root's score is the search's one eager
baseline (``Tree.baseline``): every candidate's run times eager again beside it, and the
median of those measurements is the time every listed kernel is compared with. A node's candidate is made once, when the
node is added, and carries the node's id, its parent and its kind: whoever evaluates or reports
it takes ``node.candidate`` as it is. The tree is plain data: it is saved in the trajectory
after every step and rebuilt from it on resume.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from agents.llm.client import Role
from harness.records import Candidate, EvalResult, Status

NodeKind = Literal["root", "offline", "improve", "debug"]
NOTE_CHARS = 500  # of the plan, kept as the candidate's note (the report's plan)


class LLMCall(BaseModel):
    """One role's call to the model, as the trajectory keeps it."""

    role: Role
    temperature: float | None
    text: str = Field(description="The reply, as received (capped).")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int | None = Field(
        default=None,
        description="Of the prompt tokens, those served from the provider's "
        "prompt cache; None: the server did not say (and calls saved before it was recorded).",
    )
    cost_usd: float | None = None
    seconds: float = 0.0
    attempts: int = 1
    error: str = Field(default="", description="Why the call failed, if it did.")


class Node(BaseModel):
    """One attempt: where it came from, what the roles said, what the harness found."""

    id: str
    parent: str | None = None
    kind: NodeKind
    candidate: Candidate | None = Field(
        default=None, description="What the roles wrote (none: the root, or the roles failed)."
    )
    plan: str = Field(default="", description="The grounded plan the coder followed.")
    failure: str = Field(default="", description="Why no candidate came of it (a role's failure).")
    result: EvalResult | None = None
    calls: list[LLMCall] = Field(default_factory=list)
    children: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(
        default_factory=dict, description="Wall time of this step: llm, build, check, time."
    )

    @model_validator(mode="before")
    @classmethod
    def _source_saved_on_the_node(cls, data: Any) -> Any:
        # Trajectories saved before the node held its candidate kept the bare source on it.
        if not isinstance(data, dict) or "source" not in data:
            return data
        data = dict(data)
        source, plan = data.pop("source"), data.get("plan", "")
        # A dict, validated as the node's field: a damaged file's errors name the field.
        if source and "candidate" not in data:
            data["candidate"] = {
                "id": data.get("id"), "parent": data.get("parent"), "origin": data.get("kind"),
                "source": source, "note": plan[:NOTE_CHARS] if isinstance(plan, str) else "",
            }  # fmt: skip
        return data

    @model_validator(mode="after")
    def _candidate_is_this_nodes(self) -> Node:
        made = self.candidate
        if made and (made.id, made.parent, made.origin) != (self.id, self.parent, self.kind):
            raise ValueError(
                f"node {self.id} holds the candidate of node {made.id} (parent {made.parent}, "
                f"{made.origin}); a node's candidate carries its own id, parent and kind"
            )
        return self

    @property
    def ok(self) -> bool:
        return self.result is not None and self.result.status is Status.ok

    @property
    def score_ms(self) -> float:
        """Median time of its kernel; +inf when it failed."""
        if self.ok and self.result is not None and self.result.timings.candidate is not None:
            return self.result.timings.candidate.median_ms
        return math.inf


class Baseline(BaseModel):
    """The reference's times over a search: one eager and one torch.compile time, the median
    of every candidate run's honest baseline (``Timings.eager``, ``Timings.compiled``)."""

    eager_ms: float | None = Field(default=None, description="Median of the eager medians.")
    eager_min_ms: float | None = Field(
        default=None, description="The fastest eager call of all those runs."
    )
    compiled_ms: float | None = Field(
        default=None, description="Median of the torch.compile medians (None: not measured)."
    )
    measurements: int = Field(default=0, description="Candidate runs that timed eager.")


class Tree(BaseModel):
    """Nodes by id; the root is the reference (its score: eager's time, once known)."""

    nodes: dict[str, Node] = Field(default_factory=dict)
    root_ms: float = Field(
        default=math.inf,
        description="The latest eager median: the root's score where no result holds a baseline.",
    )

    @field_validator("root_ms", mode="before")
    @classmethod
    def _not_timed_yet(cls, value: object) -> object:
        # JSON has no infinity: a tree saved before anything was timed (a search a spend cap
        # stopped at its first step) holds null there.
        return math.inf if value is None else value

    @classmethod
    def rooted(cls) -> Tree:
        return cls(nodes={"0": Node(id="0", kind="root")})

    @property
    def root(self) -> Node:
        return self.nodes["0"]

    def add(self, parent: Node, kind: NodeKind, source: str = "", plan: str = "", **fields) -> Node:
        """A new child of ``parent``; its candidate made of ``source`` (empty: no candidate)."""
        node_id = f"{parent.id}.{len(parent.children) + 1}"
        candidate = made_candidate(node_id, parent.id, kind, source, plan) if source else None
        node = Node(
            id=node_id, parent=parent.id, kind=kind, candidate=candidate, plan=plan, **fields
        )
        self.nodes[node.id] = node
        parent.children.append(node.id)
        return node

    def score(self, node: Node) -> float:
        if node.kind != "root":
            return node.score_ms
        eager = self.baseline().eager_ms
        return self.root_ms if eager is None else eager

    def baseline(self) -> Baseline:
        """The one baseline every kernel of the search is compared with (``Baseline``)."""
        timed = [node.result.timings for node in self.nodes.values() if node.result is not None]
        eager = [timings.eager for timings in timed if timings.eager is not None]
        compiled = [timings.compiled for timings in timed if timings.compiled is not None]
        if not eager:
            return Baseline()
        return Baseline(
            eager_ms=statistics.median(stats.median_ms for stats in eager),
            eager_min_ms=min(stats.min_ms for stats in eager),
            compiled_ms=statistics.median(s.median_ms for s in compiled) if compiled else None,
            measurements=len(eager),
        )

    def children(self, node: Node) -> list[Node]:
        return [self.nodes[child] for child in node.children]

    def siblings(self, node: Node) -> list[Node]:
        if node.parent is None:
            return []
        return [n for n in self.children(self.nodes[node.parent]) if n.id != node.id]

    def cousins(self, node: Node) -> list[Node]:
        """Children of the node's siblings."""
        return [cousin for sibling in self.siblings(node) for cousin in self.children(sibling)]

    def leaves(self) -> list[Node]:
        return [node for node in self.nodes.values() if not node.children]

    def leaderboard(self, top: int) -> list[Node]:
        """The fastest verified nodes, fastest first."""
        verified = [node for node in self.nodes.values() if node.ok]
        return sorted(verified, key=lambda node: node.score_ms)[:top]

    def best(self) -> Node | None:
        board = self.leaderboard(1)
        return board[0] if board else None

    def pruned(self, node: Node, after: int) -> bool:
        """A subtree is given up once ``after`` or more children all failed."""
        children = self.children(node)
        return len(children) >= after and all(not child.ok for child in children)


def made_candidate(
    node_id: str, parent: str | None, kind: NodeKind, source: str, plan: str
) -> Candidate:
    """The candidate of a node: its source, written by its kind, noted with its plan."""
    return Candidate(id=node_id, parent=parent, origin=kind, source=source, note=plan[:NOTE_CHARS])
