"""What the publishing job trusts, and what it checks again: pure policy, no GitHub calls.

The results artifact was written by a job that ran the pull request's code; a process the pull
request left behind may have rewritten it. So publish takes where it writes from its own event
and from the API (``PullFacts``), never from the artifact:

- ``followup_place``: a same-repository pull request's follow-up is a branch made on the head
  commit the API reports, which must be the approved one, and it targets the pull request's own
  head branch. A fork's pull request gets no branch at all: its head is unreviewed code, and a
  commit on it pushed into the base repository would carry that code into whatever the
  follow-up is merged into. Its comment carries the kernel as a patch instead.
- ``vet_kernels``: every kernel the artifact offers goes through the static gate and the native
  gate again (pure text and AST checks; the gate's name resolution imports only the modules on
  its allow-list, all of them loaded with kernelpilot itself). A kernel that fails is neither
  pushed nor shown as a kernel; the comment says why.
- ``check_import_path``: nothing in the artifact's folder can be imported while it does so.
"""

from __future__ import annotations

import ast
import sys
from collections import Counter
from pathlib import Path

from pydantic import BaseModel, Field

from bot.event import Event
from bot.pr.followup import BRANCH_PREFIX
from bot.pr.results import PullResults
from bot.report import TargetStatus
from harness.errors import UserError
from harness.judge.accept import review_above
from harness.static.native import check_native
from harness.static.python import check_python
from harness.static.python_rules import ALLOWED_IMPORTS


class PullFacts(BaseModel):
    """A pull request as the API reports it when publish runs."""

    number: int
    head_sha: str
    head_ref: str
    head_repo: str | None = Field(description="owner/name; None when the fork was deleted.")
    base_ref: str
    base_repo: str

    @property
    def fork(self) -> bool:
        return self.head_repo is None or self.head_repo.lower() != self.base_repo.lower()


class Place(BaseModel):
    """Where a follow-up may be pushed: a branch made on ``parent``, its pull request into
    ``into``; or, with ``into`` None, why there is none."""

    into: str | None = None
    parent: str | None = None
    why_not: str = ""
    fork: bool = Field(default=False, description="No push because the head is a fork's.")


def followup_place(event: Event, facts: PullFacts | None) -> Place:
    """From the event and the API only: the artifact has no say."""
    if event.pull is None:
        if not event.ref or not event.sha:
            return Place(why_not="the run names no branch and commit (GITHUB_REF_NAME, GITHUB_SHA)")
        return Place(into=event.ref, parent=event.sha)
    if facts is None or facts.number != event.pull.number:
        return Place(why_not="GitHub did not say what the pull request is now")
    if event.pull.fork or facts.fork:
        return Place(
            fork=True,
            why_not="the pull request comes from a fork: its head is unreviewed code, so "
            "kernelpilot pushes no branch made on it; the kernel is in this comment as a patch",
        )
    if facts.head_sha != event.pull.head_sha:
        return Place(
            why_not=f"the pull request's head moved on to {facts.head_sha[:12]} since "
            f"{event.pull.head_sha[:12]} was measured: the run for the new head makes the follow-up"
        )
    if facts.head_ref != event.pull.head_ref or facts.head_ref.startswith(BRANCH_PREFIX):
        return Place(why_not=f"the head branch is now {facts.head_ref!r}: no follow-up this time")
    return Place(into=facts.head_ref, parent=facts.head_sha)


def flag_claims(results: PullResults, review_speedup: float) -> None:
    """Every speedup over ``review_speedup`` (the base commit's, read by publish through the
    API) asks for a human review, whatever the artifact's flags and threshold say."""
    threshold = min(review_speedup, results.report.review_speedup)
    results.report.review_speedup = threshold
    for row in results.report.targets:
        if row.result is not None:
            review_above(row.result, threshold)


def vet_kernels(results: PullResults) -> list[str]:
    """Gate every offered kernel again; a refused one loses its source and says why (in
    place). What was refused, for the log."""
    refused = []
    for row in results.report.targets:
        if not row.kernel_source:
            continue
        source = results.sources.get(row.target)
        class_name = source.class_name if source else row.target.rpartition(":")[2] or "Model"
        dtype = source.dtype if source else "float32"
        reasons = kernel_reasons(row.kernel_source, class_name, dtype)
        if reasons:
            row.status = TargetStatus.refused
            row.reason = (
                "kernelpilot publish checked this kernel again and refused it, so it is "
                "neither pushed nor shown: " + "; ".join(reasons)
            )
            row.kernel_source = ""
            refused.append(f"{row.target}: {'; '.join(reasons)}")
    return refused


def kernel_reasons(source: str, class_name: str, dtype: str) -> list[str]:
    """The static gate's reasons, and the native gate's over the kernel sources: the strings
    the file hands to ``load_inline``, where each one can be followed to its text; else every
    string in the source that is not a docstring (kernel sources are string literals)."""
    reasons = check_python(source, class_name, dtype)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return reasons or ["the kernel does not parse"]
    native = _load_inline_sources(tree)
    return reasons + check_native("\n".join(_strings(tree) if native is None else native), dtype)


LOAD_INLINE_SOURCES = ("cpp_sources", "cuda_sources")


def _load_inline_sources(tree: ast.Module) -> list[str] | None:
    """The texts every ``load_inline`` call of the file compiles, or None where one cannot be
    followed to string literals (a name bound more than once, or a parameter's; an f-string, a
    call; ``load_inline`` imported under another name or passed around): then all strings are
    checked. A constructor's message copied from the user's module ("requires PyTorch >= 2.0")
    is then not read as C++."""
    nodes = list(ast.walk(tree))
    if any(_renames_load_inline(node) for node in nodes):
        return None
    stores = Counter(
        n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    )
    shadowed = {n.arg for n in nodes if isinstance(n, ast.arg)} | {
        name for n in nodes if isinstance(n, ast.Global | ast.Nonlocal) for name in n.names
    }
    constants: dict[str, list[str] | None] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if (
                isinstance(target, ast.Name)
                and stores[target.id] == 1
                and target.id not in shadowed
            ):
                constants[target.id] = _texts(node.value, constants)
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)}
    if any(_names_load_inline(n) and id(n) not in called for n in nodes):
        return None  # load_inline passed around, not called where it can be read
    texts: list[str] = []
    for call in nodes:
        if isinstance(call, ast.Call) and _names_load_inline(call.func):
            if any(keyword.arg is None for keyword in call.keywords) or any(
                isinstance(arg, ast.Starred) for arg in call.args
            ):
                return None
            given = [*call.args[1:3]]
            given += [k.value for k in call.keywords if k.arg in LOAD_INLINE_SOURCES]
            for value in given:
                found = _texts(value, constants)
                if found is None:
                    return None
                texts += found
    return texts


def _renames_load_inline(node: ast.AST) -> bool:
    """``from ... import load_inline as other`` (or an import of it under any other name)."""
    return isinstance(node, ast.ImportFrom) and any(
        alias.name == "load_inline" and alias.asname not in (None, "load_inline")
        for alias in node.names
    )


def _texts(node: ast.expr, constants: dict[str, list[str] | None]) -> list[str] | None:
    """The string literals an expression is made of (a literal, a name bound once to them, a
    list or tuple of them, ``+`` of them); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.List | ast.Tuple):
        parts = [_texts(item, constants) for item in node.elts]
        return None if any(part is None for part in parts) else [t for p in parts for t in p or []]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _texts(node.left, constants), _texts(node.right, constants)
        return None if left is None or right is None else left + right
    return None


def _names_load_inline(node: ast.AST) -> bool:
    return (isinstance(node, ast.Name) and node.id == "load_inline") or (
        isinstance(node, ast.Attribute) and node.attr == "load_inline"
    )


def _strings(tree: ast.Module) -> list[str]:
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def check_import_path(results_dir: Path) -> None:
    """Refuse to gate kernels while the artifact's folder could serve an import: the gate's
    name resolution imports its allowed modules by name."""
    root = results_dir.resolve()
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if path == root or path.is_relative_to(root):
            raise UserError(
                "the results folder is on Python's import path",
                where=f"sys.path entry {entry!r}",
                fix="run kernelpilot github publish from outside the results folder, with "
                "nothing of the results on PYTHONPATH",
            )
    for name in ALLOWED_IMPORTS:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file and Path(file).resolve().is_relative_to(root):
            raise UserError(
                f"the module {name} was imported from the results folder",
                where=file,
                fix="run kernelpilot github publish with a clean environment",
            )
