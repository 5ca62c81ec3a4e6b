"""What the flows ask of GitHub, as two small interfaces, and the two errors a write raises.

The pull-request flow's gate and publish write through a ``RepoWriter`` handed to them: the
command line makes it (``bot.github.GitHubRepo``, over PyGithub), the tests may hand in one
that keeps everything in memory. No flow makes a GitHub client of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Protocol

from pydantic import BaseModel, Field

from bot.pr.followup import Followup
from bot.pr.trust import PullFacts

REVIEW_KEY = re.compile(r"[\w./:]+")  # what may stand inside the review marker's HTML comment


class ReadOnly(Exception):
    """The token may not write here (a fork's pull_request run, a read-only permission)."""


class WriteFailed(Exception):
    """GitHub refused or kept failing a write (after retries); the message says which."""


class LineNote(BaseModel):
    """A review comment for one class: ``key`` identifies it across re-runs."""

    key: str = Field(pattern=REVIEW_KEY.pattern, max_length=300)
    path: str
    line: int
    body: str


class PullWriter(Protocol):
    """One pull request: what the gate and publish read of it and write on it. Writes raise
    ``ReadOnly`` or ``WriteFailed``."""

    def facts(self) -> PullFacts:
        """The pull request as GitHub reports it now (not as any artifact says)."""
        ...

    def file_at(self, path: str, ref: str) -> bytes | None:
        """A file of the base repository at ``ref``; None where there is none."""
        ...

    def upsert_comment(self, body: str, create: bool = True) -> str | None:
        """Edit the sticky comment, or create it (unless ``create`` is False); its URL."""
        ...

    def upsert_review(self, notes: Iterable[LineNote], commit_sha: str) -> list[str]:
        """Each note as a review comment on its line, edited where one is there already; the
        notes skipped (outside the diff, refused), for the log."""
        ...

    def permission(self, login: str) -> str | None:
        """``login``'s role on the repository (admin, maintain, write, triage, read, none);
        None when it cannot be read."""
        ...

    def remove_label(self, name: str) -> None:
        """Take the label off the pull request (already gone is fine)."""
        ...


class RepoWriter(Protocol):
    """One repository: its pull requests, and the follow-up pull request's branch."""

    def pull(self, number: int) -> PullWriter:
        """Pull request ``number`` of this repository."""
        ...

    def upsert_followup(self, base_branch: str, parent_sha: str, followup: Followup) -> str:
        """Point ``followup.branch`` at a commit on ``parent_sha`` with the files, and open (or
        edit) its pull request into ``base_branch``; the pull request's URL."""
        ...
