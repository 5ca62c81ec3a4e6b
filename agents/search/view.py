"""What the roles see of the tree: each node as a ``KernelSummary``, the search so far, and
which kernel the planner's profiling block describes.

One view in every prompt: speedups against the search's one baseline (``Tree.baseline``), the
best kernel as the tree ranks it (lowest median), and every attempt that failed, whatever part
of the tree it grew in, in one line each.
"""

from __future__ import annotations

from functools import cache

from agents.context_records import FailedAttempt, KernelSummary, Reference, SearchState
from agents.search.tree import Node, Tree
from harness.judge.accept import accept
from harness.machine import Machine, describe_machine
from harness.records import Status

FAILURES_SHOWN = 15  # the latest failed attempts listed in a prompt (one line each)
REASON_CHARS = 200  # of a failed attempt's reason, in its line


def kernel_summary(tree: Tree, node: Node, reference_source: str) -> KernelSummary:
    """``node`` as a role sees it: the root is the reference module itself, timed as the
    search's eager baseline."""
    baseline = tree.baseline()
    if node.kind == "root":
        return KernelSummary(
            node_id=node.id, code=reference_source, status="reference",
            median_ms=baseline.eager_ms, min_ms=baseline.eager_min_ms,
            speedup_vs_eager=1.0 if baseline.eager_ms else None,
            speedup_vs_compile=_ratio(baseline.compiled_ms, baseline.eager_ms),
        )  # fmt: skip
    result, source = node.result, node.candidate.source if node.candidate else ""
    if result is None:  # a repeat (recorded with its failure), not run yet, or no candidate
        status = ("repeat" if node.failure else "pending") if node.candidate else "no_candidate"
        return KernelSummary(node_id=node.id, code=source, status=status, detail=node.failure)
    timed = result.timings.candidate if result.status is Status.ok else None
    median = timed.median_ms if timed else None
    best = tree.best()
    best_timed = best.result.timings.candidate if best and best.result else None
    against = best is not None and best is not node and timed and best_timed
    return KernelSummary(
        node_id=node.id, code=source, status=result.status.value, median_ms=median,
        min_ms=timed.min_ms if timed else None,
        speedup_vs_eager=_ratio(baseline.eager_ms, median),
        speedup_vs_compile=_ratio(baseline.compiled_ms, median),
        vs_eager=result.vs_eager, vs_compile=result.vs_compile,
        best_id=best.id if against and best else "",
        vs_best=accept(timed, best_timed) if against and timed and best_timed else None,
        detail="" if result.status is Status.ok else _failure_detail(node),
    )  # fmt: skip


def search_state(tree: Tree, reference_source: str) -> SearchState:
    """The baseline, the best kernel (its code left out: it is listed where it is shown) and
    the latest failed attempts."""
    best = tree.best()
    summary = kernel_summary(tree, best, reference_source) if best else None
    failures = [attempt for node in tree.nodes.values() if (attempt := failed_attempt(node))]
    shown = failures[-FAILURES_SHOWN:]
    return SearchState(
        baseline=tree.baseline(),
        best=summary.model_copy(update={"code": ""}) if summary else None,
        failures=shown,
        failures_omitted=len(failures) - len(shown),
    )


def failed_attempt(node: Node) -> FailedAttempt | None:
    """``node`` in one line if it made no verified kernel (None: verified, pending, the root)."""
    if node.kind == "root" or node.parent is None:
        return None
    result = node.result
    if result is not None:
        if result.status is Status.ok:
            return None
        failed = next((check.name for check in result.checks if not check.passed), "")
        stage = f"{result.status.value} ({failed})" if failed else result.status.value
        reason = result.reason or _failure_detail(node)
    elif node.failure:
        stage = "repeat" if node.candidate else "no candidate"
        reason = node.failure
    else:
        return None  # not evaluated yet
    return FailedAttempt(node_id=node.id, kind=node.kind, parent=node.parent, stage=stage,
                         reason=_one_line(reason))  # fmt: skip


def profiled_node(tree: Tree, node: Node) -> Node:
    """The node whose measurements the planner's profiling block shows: the selected one; for
    the reference (which is timed only as eager) the best kernel, when there is one."""
    if node.kind == "root":
        return tree.best() or node
    return node


def machine_of(reference: Reference) -> Machine:
    """The machine ``reference`` is judged on: the one it names, else this one."""
    return reference.machine or _this_machine(reference.device)


@cache
def _this_machine(device: str) -> Machine:
    """Described once per process and device: the OS and the driver do not change mid-run."""
    return describe_machine(device)


def _failure_detail(node: Node) -> str:
    result = node.result
    if result is None:
        return node.failure
    failed = [f"{check.name}: {check.detail}" for check in result.checks if not check.passed]
    return "\n".join([result.reason, *failed]).strip()


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= REASON_CHARS else line[: REASON_CHARS - 3] + "..."


def _ratio(baseline_ms: float | None, median_ms: float | None) -> float | None:
    if baseline_ms is None or not median_ms:
        return None
    return baseline_ms / median_ms
