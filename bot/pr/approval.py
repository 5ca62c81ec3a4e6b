"""May this pull request's code run on the runner? (pure)

GitHub's guidance for self-hosted runners: a fork's code runs only after a maintainer has
looked at it. A maintainer approves by adding the approval label; that event carries the head
SHA at that moment, and only that commit is checked out and run. A later push to the fork makes
a new head that nobody has looked at: the label is removed and a new approval is needed. A
pull request from a branch of the repository itself is by someone who can push there already,
so it runs without a label (adding the label asks for a re-run). Another label added to a pull
request changes nothing. Manual and scheduled runs are started by maintainers.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from bot.event import Event

# Repository roles that may approve a fork's code by labeling it (GitHub's permission names).
APPROVERS = {"admin", "maintain", "write"}


class GateDecision(BaseModel):
    run: bool
    sha: str = Field(default="", description="The commit that may be checked out and run.")
    reason: str
    remove_label: bool = Field(
        default=False, description="The approval label is stale (a push since it was added)."
    )
    notice: str | None = Field(
        default=None, description="What the sticky comment says while nothing runs."
    )


def decide(event: Event, approval_label: str, sender_permission: str | None = None) -> GateDecision:
    """The gate for one event. ``sender_permission`` is the labeler's role on the repository
    (asked only for a fork's labeled event; None when it could not be read)."""
    pull = event.pull
    if pull is None:
        return GateDecision(
            run=True, sha=event.sha, reason=f"{event.name}: started by a maintainer"
        )
    if event.action == "labeled" and event.label != approval_label:
        return GateDecision(run=False, reason=f"another label ({event.label}): nothing to do")
    if not pull.fork:  # the approval label on such a pull request asks for a re-run
        return GateDecision(run=True, sha=pull.head_sha, reason="a branch of this repository")
    waiting = (
        f"This pull request comes from a fork ({pull.head_repo}). kernelpilot runs its code on a "
        f"self-hosted GPU runner only after a maintainer reviews the changes and adds the "
        f"`{approval_label}` label; each new push needs the label again."
    )
    if event.action == "labeled" and event.label == approval_label:
        if sender_permission not in APPROVERS:
            return GateDecision(
                run=False,
                reason=f"the label was added by {event.sender or 'someone'}, whose permission "
                f"is {sender_permission or 'unknown'}, not write or above",
                notice=waiting,
            )
        return GateDecision(
            run=True,
            sha=pull.head_sha,
            reason=f"fork approved by {event.sender} at {pull.head_sha[:12]}",
        )
    if event.action == "synchronize" and approval_label in pull.labels:
        return GateDecision(
            run=False,
            reason="new commits since the approval label was added",
            remove_label=True,
            notice=f"New commits were pushed after approval, so the `{approval_label}` label was "
            f"removed. {waiting}",
        )
    return GateDecision(
        run=False, reason=f"fork without a fresh `{approval_label}` label", notice=waiting
    )
