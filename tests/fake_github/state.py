"""The fake's state: users and tokens, repositories with their commits, issues and pulls."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from .diff import diff_files
from .errors import ApiError
from .git import Objects, Signature

RATE_LIMIT = 5000
LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def noreply_email(login: str) -> str:
    return f"{login}@users.noreply.github.com"


@dataclass
class User:
    login: str
    id: int
    permission: str = "none"  # what this user (and its token) may do: none, read, write, admin
    app: bool = False  # an installation token (GITHUB_TOKEN, an App): GitHub refuses GET /user


@dataclass
class Commit:
    sha: str
    message: str
    parents: list[str]
    files: dict[str, bytes]  # the whole tree at this commit
    author: str | None  # the GitHub user it is credited to (None: an author email of no user)
    at: str
    tree: str = ""  # the root tree's sha (written to the objects when the commit is made)
    modes: dict[str, str] = field(default_factory=dict)  # the paths whose mode is not 100644
    # the git author and committer lines as given to POST git/commits; None: the author's
    # noreply identity at ``at`` (for the committer line: the author line)
    git_author: Signature | None = None
    git_committer: Signature | None = None

    @property
    def author_line(self) -> Signature:
        if self.git_author is not None:
            return self.git_author
        assert self.author is not None, "a commit without a git author is credited to a user"
        return Signature(self.author, noreply_email(self.author), self.at)

    @property
    def committer_line(self) -> Signature:
        return self.git_committer or self.author_line


@dataclass
class Label:
    name: str
    id: int
    color: str = "ededed"
    description: str = ""


@dataclass
class Comment:
    id: int
    number: int
    body: str
    author: str
    created_at: str
    updated_at: str


@dataclass
class Review:
    id: int
    number: int
    author: str
    body: str
    state: str
    commit_id: str
    submitted_at: str


@dataclass
class ReviewComment:
    id: int
    number: int
    review_id: int | None
    path: str
    line: int
    side: str
    body: str
    commit_id: str
    author: str
    created_at: str
    updated_at: str
    in_reply_to: int | None = None


@dataclass
class IssueEvent:
    id: int
    number: int
    event: str  # labeled, unlabeled, closed, reopened
    actor: str
    label: str | None
    created_at: str


@dataclass
class PullInfo:
    head_repo: str
    head_ref: str
    base_ref: str
    head_sha: str  # the head when the branch is gone; otherwise the branch's tip is the head
    files: list[dict[str, Any]] | None = None  # None: the diff of base and head trees
    draft: bool = False
    maintainer_can_modify: bool = False


@dataclass
class Issue:
    number: int
    id: int
    title: str
    body: str | None
    author: str
    labels: list[str]
    created_at: str
    updated_at: str
    state: str = "open"
    state_reason: str | None = None
    closed_at: str | None = None
    pull: PullInfo | None = None


@dataclass
class Repo:
    full_name: str
    id: int
    default_branch: str
    private: bool = False
    parent: str | None = None
    refs: dict[str, str] = field(default_factory=dict)  # "refs/heads/main" -> sha
    commits: dict[str, Commit] = field(default_factory=dict)  # shared with forks, as on GitHub
    objects: Objects = field(default_factory=Objects)  # the blobs and trees, shared likewise
    labels: dict[str, Label] = field(default_factory=dict)
    issues: dict[int, Issue] = field(default_factory=dict)
    comments: dict[int, Comment] = field(default_factory=dict)
    reviews: dict[int, Review] = field(default_factory=dict)
    review_comments: dict[int, ReviewComment] = field(default_factory=dict)
    events: list[IssueEvent] = field(default_factory=list)

    @property
    def owner(self) -> str:
        return self.full_name.split("/")[0]

    @property
    def name(self) -> str:
        return self.full_name.split("/")[1]

    def resolve(self, ref: str) -> str | None:
        """The sha a branch name, ``heads/x``, ``refs/heads/x`` or sha names, else None."""
        for candidate in (f"refs/heads/{ref}", f"refs/{ref}", ref, f"refs/tags/{ref}"):
            if candidate in self.refs:
                return self.refs[candidate]
        return ref if ref in self.commits else None

    def tree(self, ref: str) -> dict[str, bytes]:
        sha = self.resolve(ref)
        if sha is None:
            raise ApiError(404, f"No commit found for the ref {ref}")
        return self.commits[sha].files

    def is_ancestor(self, old: str, new: str) -> bool:
        seen, todo = set(), [new]
        while todo:
            sha = todo.pop()
            if sha == old:
                return True
            if sha not in seen and sha in self.commits:
                seen.add(sha)
                todo.extend(self.commits[sha].parents)
        return False

    def label(self, name: str, ids: Callable[[], int]) -> Label:
        """The label named so, made on first use as GitHub does when a writer applies it."""
        if name not in self.labels:
            self.labels[name] = Label(name, ids())
        return self.labels[name]

    def issue(self, number: int | str) -> Issue:
        issue = self.issues.get(int(number))
        if issue is None:
            raise ApiError(404, "Not Found")
        return issue

    def pull(self, number: int | str) -> Issue:
        issue = self.issue(number)
        if issue.pull is None:
            raise ApiError(404, "Not Found")
        return issue


@dataclass
class State:
    users: dict[str, User] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)  # token -> login
    repos: dict[str, Repo] = field(default_factory=dict)
    rate_remaining: int = RATE_LIMIT
    rate_reset: int = field(default_factory=lambda: int(time.time()) + 3600)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1000))

    def next_id(self) -> int:
        return next(self._ids)

    def user(self, login: str) -> User:
        """The user of this login, made (with no permission) the first time it is named."""
        if login not in self.users:
            self.users[login] = User(login, self.next_id(), app=login.endswith("[bot]"))
        return self.users[login]

    def repo(self, full_name: str) -> Repo:
        repo = self.repos.get(full_name)
        if repo is None:
            raise ApiError(404, "Not Found")
        return repo

    def permission(self, user: User | None, repo: Repo) -> str:
        if user is None:
            return "none" if repo.private else "read"
        return "admin" if user.login == repo.owner else user.permission

    def commit(
        self,
        repo: Repo,
        parent: str | None,
        files: dict[str, bytes],
        message: str,
        author: str,
        sha: str | None = None,
    ) -> Commit:
        """A commit of ``files`` (its tree written to the objects); the paths it keeps from
        ``parent`` keep their modes."""
        number = self.next_id()
        sha = sha or hashlib.sha1(f"{parent}:{message}:{author}:{number}".encode()).hexdigest()
        kept = repo.commits[parent].modes if parent else {}
        modes = {path: mode for path, mode in kept.items() if path in files}
        commit = Commit(
            sha,
            message,
            [parent] if parent else [],
            files,
            author,
            now(),
            repo.objects.write_tree(files, modes),
            modes,
        )
        repo.commits[sha] = commit
        return commit

    def login_for(self, email: str) -> str | None:
        """The user GitHub credits a commit line to: the one whose noreply address it is (the
        ``login@`` or ``id+login@`` form), else None."""
        local, _, domain = email.partition("@")
        login = local.partition("+")[2] or local
        return login if domain == "users.noreply.github.com" and login in self.users else None

    def pull_files(self, repo: Repo, issue: Issue) -> list[dict[str, Any]]:
        pull = issue.pull
        assert pull is not None
        if pull.files is not None:
            return pull.files
        head = self.repos[pull.head_repo]
        return diff_files(repo.tree(pull.base_ref), head.tree(head_sha(self, issue)))


def head_sha(state: State, issue: Issue) -> str:
    pull = issue.pull
    assert pull is not None
    head = state.repos.get(pull.head_repo)
    return (head.refs.get(f"refs/heads/{pull.head_ref}") if head else None) or pull.head_sha


def new_issue(
    state: State,
    repo: Repo,
    title: str,
    body: str | None,
    author: str,
    labels: Iterable[str],
    pull: PullInfo | None = None,
    number: int | None = None,
) -> Issue:
    number = number or max(repo.issues, default=0) + 1
    assert number not in repo.issues, f"#{number} exists in {repo.full_name}"
    names = [repo.label(name, state.next_id).name for name in labels]
    issue = Issue(number, state.next_id(), title, body, author, names, now(), now(), pull=pull)
    repo.issues[number] = issue
    return issue
