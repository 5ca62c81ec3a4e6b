"""How the next node to grow is chosen: ``select(tree) -> Node``.

Two strategies, compared on the same scripted runs (bench/): greedy always grows the fastest
node; epsilon-greedy (STARK) grows the fastest with probability 1 - epsilon and otherwise a
uniformly random leaf, failed ones included (the debugger repairs those). Both skip the root
once it has its cap of children, and subtrees whose children all failed.
"""

from __future__ import annotations

import random
from typing import Protocol

from agents.search.config import SearchConfig
from agents.search.tree import Node, Tree
from harness.records import Status


class Strategy(Protocol):
    def select(self, tree: Tree) -> Node: ...


class Greedy:
    def __init__(self, root_children: int = 4, prune_after: int = 3, root_first: int = 2) -> None:
        self.root_children, self.prune_after = root_children, prune_after
        self.root_first = root_first

    def select(self, tree: Tree) -> Node:
        if self.root_due(tree):
            return tree.root
        return min(self.open_nodes(tree), key=tree.score)

    def root_due(self, tree: Tree) -> bool:
        """The first ``root_first`` children grow from the reference itself (the offline
        kernel is one): the model designs its own kernel from the original before it refines
        the best one."""
        return len(tree.root.children) < self.root_first

    def open_nodes(self, tree: Tree) -> list[Node]:
        """Nodes that may still grow: verified ones (the root under its cap) not pruned."""
        nodes = [
            node
            for node in tree.nodes.values()
            if (node.ok or node.kind == "root") and not tree.pruned(node, self.prune_after)
        ]
        if len(tree.root.children) >= self.root_children and len(nodes) > 1:
            nodes = [node for node in nodes if node.kind != "root"]
        return nodes or [tree.root]


class EpsilonGreedy(Greedy):
    def __init__(
        self,
        rng: random.Random,
        epsilon: float = 0.3,
        root_children: int = 4,
        prune_after: int = 3,
        root_first: int = 2,
    ) -> None:
        super().__init__(root_children, prune_after, root_first)
        self.rng, self.epsilon = rng, epsilon

    def select(self, tree: Tree) -> Node:
        if self.root_due(tree):
            return tree.root
        leaves = [
            leaf
            for leaf in tree.leaves()
            if leaf.kind != "root" and leaf.candidate and not self._given_up(tree, leaf)
            and not _failed_in_kernelpilot(leaf)
        ]  # fmt: skip
        if leaves and self.rng.random() < self.epsilon:
            return self.rng.choice(sorted(leaves, key=lambda leaf: leaf.id))
        return super().select(tree)

    def _given_up(self, tree: Tree, leaf: Node) -> bool:
        parent = tree.nodes[leaf.parent] if leaf.parent else None
        return parent is not None and tree.pruned(parent, self.prune_after)


def _failed_in_kernelpilot(node: Node) -> bool:
    """kernelpilot's own code failed on it (a bug of ours), or the machine was too busy to judge
    its timing: nothing for the debugger to repair."""
    return node.result is not None and node.result.status in (
        Status.harness_error,
        Status.unjudged,
    )


def make_strategy(config: SearchConfig, rng: random.Random) -> Strategy:
    """The strategy ``config`` names, with its knobs (``[tool.kernelpilot.search]``)."""
    shape = {"root_children": config.root_children, "prune_after": config.prune_after,
             "root_first": config.root_first}  # fmt: skip
    if config.strategy == "greedy":
        return Greedy(**shape)
    if config.strategy == "epsilon-greedy":
        return EpsilonGreedy(rng, config.epsilon, **shape)
    raise ValueError(f"unknown search strategy {config.strategy!r}: greedy or epsilon-greedy")
