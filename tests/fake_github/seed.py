"""Seeding the fake's state and reading it back: the half of ``FakeGitHub`` a test calls most."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from .diff import file_entry
from .state import LEVELS, Comment, Issue, IssueEvent, PullInfo, Repo, State, User, new_issue, now


class Seeding:
    """``add_user``, ``add_repo``, ``fork``, ``push``, ``add_pull``, ``add_comment``,
    ``add_label``; ``repo``, ``issue``, ``comments``, ``file``. Each takes the server's lock."""

    state: State
    _lock: threading.RLock

    def add_user(
        self, token: str | None, login: str, permission: str = "write", app: bool | None = None
    ) -> User:
        """A user whose ``token`` may do ``permission`` (none, read, write, admin) on every repo
        it does not own (admin on its own). The permission is the token's: a read-only token is
        refused every write, as GITHUB_TOKEN is on a fork's PR, even where a person with read
        access could comment on a public repository; seed such people's PRs and comments with
        ``add_pull`` and ``add_comment``. ``app`` (default: a login ending in ``[bot]``) marks
        an installation token, which GitHub refuses ``GET /user``."""
        assert permission in LEVELS, f"permission must be one of {sorted(LEVELS)}"
        with self._lock:
            user = self.state.user(login)
            user.permission = permission
            user.app = login.endswith("[bot]") if app is None else app
            if token is not None:
                self.state.tokens[token] = login
            return user

    def add_repo(
        self,
        full_name: str,
        default_branch: str = "main",
        files: dict[str, str | bytes] | None = None,
        private: bool = False,
    ) -> Repo:
        """A repository with one commit holding ``files`` on ``default_branch``."""
        with self._lock:
            assert full_name not in self.state.repos, f"{full_name} exists"
            repo = Repo(full_name, self.state.next_id(), default_branch, private)
            self.state.repos[full_name] = repo
            self.state.user(repo.owner)
            commit = self.state.commit(repo, None, _encode(files), "Initial commit", repo.owner)
            repo.refs[f"refs/heads/{default_branch}"] = commit.sha
            return repo

    def fork(self, full_name: str, owner: str) -> Repo:
        """``owner``'s fork of ``full_name``: same branches, commits and git objects shared with
        the parent."""
        with self._lock:
            parent = self.state.repo(full_name)
            name = f"{owner}/{parent.name}"
            if name not in self.state.repos:
                self.state.repos[name] = Repo(
                    name,
                    self.state.next_id(),
                    parent.default_branch,
                    parent.private,
                    parent.full_name,
                    dict(parent.refs),
                    parent.commits,
                    objects=parent.objects,
                )
                self.state.user(owner)
            return self.state.repos[name]

    def push(
        self,
        full_name: str,
        branch: str,
        files: dict[str, str | bytes] | None = None,
        message: str = "push",
        author: str | None = None,
        sha: str | None = None,
        start: str | None = None,
    ) -> str:
        """A new commit on ``branch`` (made from ``start`` or the default branch if missing)
        whose tree is the old one updated with ``files``; returns its sha."""
        with self._lock:
            repo = self.state.repo(full_name)
            ref = f"refs/heads/{branch}"
            parent = repo.refs.get(ref) or repo.resolve(start or repo.default_branch)
            assert parent is not None, f"no commit to start {branch} from"
            tree = repo.commits[parent].files | _encode(files)
            commit = self.state.commit(repo, parent, tree, message, author or repo.owner, sha)
            repo.refs[ref] = commit.sha
            return commit.sha

    def add_pull(
        self,
        full_name: str,
        number: int | None = None,
        head_ref: str = "feature",
        base_ref: str | None = None,
        head_sha: str | None = None,
        fork: bool = False,
        labels: Iterable[str] = (),
        files: list[str | dict[str, Any]] | None = None,
        author: str = "contributor",
        title: str = "A change",
        body: str = "",
        head_files: dict[str, str | bytes] | None = None,
    ) -> Issue:
        """An open PR from ``head_ref`` (in ``author``'s fork when ``fork``) into ``base_ref``.

        The head gets a new commit (sha ``head_sha`` if given) holding ``head_files``. The PR's
        files are ``files`` if given (names or dicts of GitHub's File fields), else the diff of
        the base and head trees, patches included.
        """
        with self._lock:
            repo = self.state.repo(full_name)
            head_repo = self.fork(full_name, author) if fork else repo
            base_ref = base_ref or repo.default_branch
            sha = self.push(
                head_repo.full_name,
                head_ref,
                head_files,
                f"{title} (head)",
                author,
                head_sha,
                start=base_ref,
            )
            pull = PullInfo(
                head_repo.full_name,
                head_ref,
                base_ref,
                sha,
                [file_entry(f) for f in files] if files is not None else None,
            )
            issue = new_issue(self.state, repo, title, body, author, labels, pull, number)
            self.state.user(author)
            return issue

    def add_comment(self, full_name: str, number: int, body: str, author: str) -> Comment:
        with self._lock:
            repo = self.state.repo(full_name)
            stamp = now()
            comment = Comment(
                self.state.next_id(), repo.issue(number).number, body, author, stamp, stamp
            )
            repo.comments[comment.id] = comment
            self.state.user(author)
            return comment

    def add_label(self, full_name: str, number: int, label: str, actor: str) -> IssueEvent:
        """``actor`` labels issue or PR ``number`` (the ``labeled`` event is recorded)."""
        with self._lock:
            repo = self.state.repo(full_name)
            issue = repo.issue(number)
            repo.label(label, self.state.next_id)
            if label not in issue.labels:
                issue.labels.append(label)
            event = IssueEvent(self.state.next_id(), number, "labeled", actor, label, now())
            repo.events.append(event)
            return event

    # -- reading back

    def repo(self, full_name: str) -> Repo:
        return self.state.repo(full_name)

    def issue(self, full_name: str, number: int) -> Issue:
        return self.repo(full_name).issue(number)

    def comments(self, full_name: str, number: int) -> list[Comment]:
        return [c for c in self.repo(full_name).comments.values() if c.number == number]

    def file(self, full_name: str, path: str, ref: str | None = None) -> bytes | None:
        repo = self.repo(full_name)
        return repo.tree(ref or repo.default_branch).get(path)


def _encode(files: dict[str, str | bytes] | None) -> dict[str, bytes]:
    return {p: d.encode() if isinstance(d, str) else d for p, d in (files or {}).items()}
