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
    """The static gate's reasons, and the native gate's over every string in the source that
    is not a docstring (kernel sources are string literals handed to load_inline)."""
    reasons = check_python(source, class_name, dtype)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return reasons or ["the kernel does not parse"]
    return reasons + check_native("\n".join(_strings(tree)), dtype)


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
