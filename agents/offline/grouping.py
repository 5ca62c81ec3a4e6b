"""Group pointwise nodes into fused kernels, and order the graph around the groups.

A group grows from each pointwise node into the groups of its pointwise producers, as long as
the group stays convex (no path leaves it and comes back, or the kernel would need its own
output as an input) and every value it hands to the rest of the graph has the group's full
iteration shape (smaller intermediates, like ``sigmoid(gate)`` of a ``[dim]`` gate, are recomputed
per element inside the kernel instead). A group holds at most one row reduction (a softmax, or a
row's sum kept as a dimension of 1, over the last dimension: ``ops.ROW_KINDS``), of a value of
the group's full shape, and only inputs its kernel can read a row at a time.

A group earns a kernel only where eager PyTorch would do more work for it (``worth_a_kernel``):
one pointwise op alone is one pass of eager's own, reading and writing what the kernel would,
so it stays PyTorch's call.
"""

from __future__ import annotations

import heapq

import torch
from torch.fx import Node

from agents.offline.layout import read_layout, rows_readable
from agents.offline.ops import ROW_KINDS, SOFTMAX_KINDS, SUM_KINDS, PointwiseOp


def fusion_groups(nodes: list[Node], ops: dict[Node, PointwiseOp]) -> list[list[Node]]:
    """Maximal groups of connected pointwise nodes, each in graph order, in graph order."""
    order = {node: index for index, node in enumerate(nodes)}
    group_of: dict[Node, int] = {}
    members: dict[int, set[Node]] = {}
    for node in nodes:
        if node not in ops:
            continue
        producers = sorted(
            {
                group_of[value]
                for value in ops[node].operands
                if isinstance(value, Node) and value in group_of
            }
        )
        target = _join(node, producers, members, group_of, order, ops)
        for member in members[target]:
            group_of[member] = target
    _join_sums_to_their_sources(members, group_of, order, ops, nodes)
    groups = [sorted(group, key=order.__getitem__) for group in members.values()]
    return sorted(groups, key=lambda group: order[group[0]])


def _join_sums_to_their_sources(
    members: dict[int, set[Node]],
    group_of: dict[Node, int],
    order: dict[Node, int],
    ops: dict[Node, PointwiseOp],
    nodes: list[Node],
) -> None:
    """A row's sum is one value a row: it cannot join the ops it reduces until the ops reading
    it have joined it (the group would hand it on at another shape), so the group growing in
    graph order leaves those ops apart (``abs`` of ``x / x.abs().sum(-1, keepdim=True)``). Join
    the group of each sum's source to the sum's own now, where the union is a valid group."""
    for node in [node for node in order if node in ops and ops[node].kind in SUM_KINDS]:
        source = ops[node].operands[0]
        if not isinstance(source, Node) or source not in group_of:
            continue
        mine, theirs = group_of[node], group_of[source]
        if mine == theirs:
            continue
        union = members[mine] | members[theirs]
        others = [group for key, group in members.items() if key not in (mine, theirs)]
        if _valid(union, order, ops) and _acyclic([*others, union], nodes):
            members[mine] = union
            del members[theirs]
            for member in union:
                group_of[member] = mine


def _join(
    node: Node,
    producers: list[int],
    members: dict[int, set[Node]],
    group_of: dict[Node, int],
    order: dict,
    ops: dict[Node, PointwiseOp],
) -> int:
    """Put ``node`` into all its producers' groups, or the latest one it can join, or alone.
    Every group holds nodes up to ``node`` only, so a walk from the candidate that passes the
    candidate's last node outside every group cannot come back (``_convex``)."""
    choices = [producers] if len(producers) > 1 else []
    choices += [[group] for group in reversed(producers)]
    for choice in choices:
        candidate = set().union(*(members[group] for group in choice)) | {node}
        grouped = {value: members[key] for value, key in group_of.items() if key not in choice}
        if _valid(candidate, order, ops) and _convex(candidate, order, grouped):
            for group in choice[1:]:
                del members[group]
            members[choice[0]] = candidate
            return choice[0]
    members[order[node]] = {node}
    return order[node]


def worth_a_kernel(group: list[Node], ops: dict[Node, PointwiseOp]) -> bool:
    """Whether the fused kernel can beat eager on ``group``: a chain of two or more ops (eager
    writes and reads every value between them), or a softmax (eager's takes passes of its own
    over a row). A lone pointwise op is already one pass at eager's memory speed: its kernel
    could only tie (KernelBench level1 26_GELU_: 0.92x, bench/BENCHMARKS.md section 7), and the
    search would spend a candidate's evaluation learning so.

    A row's sum is read twice by the row kernel (once to sum, once for the ops after it), once
    by eager's own: the kernel wins only where eager would also write and read a value of the
    row's size, one computed before the sum (``x / x.abs().mean(-1, keepdim=True)``: three
    passes against eager's five) or a chain after it. Not ``x / x.norm(dim=-1, keepdim=True)``
    (two reads and a write either way), nor a sum alone (one value a row: nothing a row kernel
    writes)."""
    sums = [node for node in group if ops[node].kind in SUM_KINDS]
    if sums:
        return ops[sums[0]].operands[0] in group or len(group) > 2
    return len(group) > 1 or ops[group[0]].kind in SOFTMAX_KINDS


def _acyclic(groups: list[set[Node]], nodes: list[Node]) -> bool:
    """Whether the graph, each group taken as one step, still has an order: a group that is
    convex alone may still wait on a value that waits on it through another group."""
    return _in_order(nodes, groups) is not None


def group_outputs(group: list[Node]) -> list[Node]:
    """The members whose value is read outside the group: the kernel's outputs."""
    inside = set(group)
    return [node for node in group if any(user not in inside for user in node.users)]


def iteration_shape(group: list[Node] | set[Node]) -> torch.Size:
    return torch.broadcast_shapes(*(node.meta["tensor_meta"].shape for node in group))


def schedule(nodes: list[Node], groups: list[list[Node]]) -> list[Node | tuple[Node, ...]]:
    """Graph order with each group as one step, placed where all its inputs are ready."""
    steps = _in_order(nodes, groups)
    if steps is None:
        raise RuntimeError("fusion groups form a cycle; fusion_groups() must prevent this")
    return steps


def _in_order(
    nodes: list[Node], groups: list[list[Node]] | list[set[Node]]
) -> list[Node | tuple[Node, ...]] | None:
    """The graph's nodes with each group as one step (its nodes in graph order), each step as
    early as its inputs allow and the earliest first among those ready; None where the groups
    wait on each other."""
    order = {node: index for index, node in enumerate(nodes)}
    unit_of: dict[Node, Node | tuple[Node, ...]] = {node: node for node in nodes}
    for group in groups:
        ordered = tuple(sorted(group, key=order.__getitem__))
        for node in ordered:
            unit_of[node] = ordered
    units = list(dict.fromkeys(unit_of[node] for node in nodes))
    needs = {unit: _unit_inputs(unit, unit_of) for unit in units}
    users: dict[Node | tuple[Node, ...], list] = {unit: [] for unit in units}
    for unit, inputs in needs.items():
        for need in inputs:
            users[need].append(unit)

    def first(unit: Node | tuple[Node, ...]) -> int:
        return order[unit[0] if isinstance(unit, tuple) else unit]

    waiting = {unit: len(inputs) for unit, inputs in needs.items()}
    ready = [(first(unit), unit) for unit in units if not needs[unit]]  # firsts are unique
    heapq.heapify(ready)
    steps: list[Node | tuple[Node, ...]] = []
    while ready:
        _, unit = heapq.heappop(ready)
        steps.append(unit)
        for user in users[unit]:
            waiting[user] -= 1
            if waiting[user] == 0:
                heapq.heappush(ready, (first(user), user))
    return steps if len(steps) == len(units) else None


def _unit_inputs(unit: Node | tuple[Node, ...], unit_of: dict) -> set:
    members = unit if isinstance(unit, tuple) else (unit,)
    return {
        unit_of[value]
        for node in members
        for value in node.all_input_nodes
        if unit_of[value] != unit
    }


def _valid(candidate: set[Node], order: dict[Node, int], ops: dict[Node, PointwiseOp]) -> bool:
    return _convex(candidate, order) and _outputs_full_size(candidate) and _rows_fit(candidate, ops)


def _convex(
    candidate: set[Node], order: dict[Node, int], grouped: dict[Node, set[Node]] | None = None
) -> bool:
    """No path leaves ``candidate`` and comes back, or the kernel would need its own output as
    an input. With ``grouped`` (the other groups' members, by node), a path may also come back
    through another group, which runs as one step: a walk that reaches one member goes on from
    all of them (a group convex alone could otherwise wait on a group that waits on it)."""
    last = max(order[node] for node in candidate)
    grouped = grouped or {}
    stack = [user for node in candidate for user in node.users if user not in candidate]
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in seen or (order[node] > last and node not in grouped):
            continue
        for member in grouped.get(node, {node}):
            seen.add(member)
            for user in member.users:
                if user in candidate:
                    return False
                stack.append(user)
    return True


def _outputs_full_size(candidate: set[Node]) -> bool:
    try:
        shape = iteration_shape(candidate)
    except RuntimeError:  # shapes that do not broadcast together cannot share one loop
        return False
    return all(
        node.meta["tensor_meta"].shape == shape
        for node in candidate
        if any(user not in candidate for user in node.users)
    )


def _rows_fit(candidate: set[Node], ops: dict[Node, PointwiseOp]) -> bool:
    """At most one row reduction, over rows of the group's whole shape, and every input of the
    group readable a row at a time."""
    reductions = [node for node in candidate if ops[node].kind in ROW_KINDS]
    if not reductions:
        return True
    if len(reductions) > 1:
        return False
    shape = tuple(iteration_shape(candidate))
    source = ops[reductions[0]].operands[0]
    if not isinstance(source, Node) or tuple(source.meta["tensor_meta"].shape) != shape:
        return False
    inputs = {
        value
        for node in candidate
        for value in node.all_input_nodes
        if value not in candidate and "tensor_meta" in value.meta
    }
    layouts = [read_layout(tuple(value.meta["tensor_meta"].shape), shape) for value in inputs]
    return rows_readable([splits for _, splits in layouts], len(shape))
