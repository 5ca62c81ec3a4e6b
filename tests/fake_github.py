"""A stateful fake of the GitHub REST API: a real HTTP server on 127.0.0.1 that PyGithub talks to.

PyGithub is pointed at it the GitHub Enterprise way (``Github(base_url=server.base_url)``, a URL
ending in ``/api/v3``), so its URL building, ``Link``-header pagination, urllib3 retries and error
mapping run as they do against github.com. The state lives in memory: users and their tokens,
repositories (forks share their parent's commits) with commits, branches and file contents per
commit, issues and pull requests sharing one numbering, labels and label events, issue comments,
reviews and review comments. Answers carry the fields PyGithub parses (url, html_url, id, number,
user.login, head.ref/sha/repo.full_name, ...), errors GitHub's body (``message``, ``errors``,
``documentation_url``, ``status``), and every answer the ``x-ratelimit-*`` headers.

What GitHub enforces and a bot can get wrong is enforced here too: a read-only token (GITHUB_TOKEN
on a fork's PR) gets 403 on every write; an installation token (GITHUB_TOKEN, a GitHub App) gets
403 on ``GET /user``; a second open PR for one head and base, an existing ref, a review comment on
a line outside the diff, a non-fast-forward ref update, a file update without the blob's sha get
GitHub's 422 (409 for a stale sha). Tests program faults (``fail_next``) and read every request
(``requests``, ``calls``). Seed with ``add_user``, ``add_repo``, ``fork``, ``add_pull``, ``push``,
``add_comment``, ``add_label``; read the state back with ``repo``, ``issue``, ``comments`` and
``file``; ``client(token)`` is a PyGithub client for it, ``pull_event`` a webhook payload.
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import itertools
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import github

API_PREFIX = "/api/v3"
DOCS = "https://docs.github.com/rest"
RATE_LIMIT = 5000
LEVELS = {"none": 0, "read": 1, "write": 2, "admin": 3}
SECONDARY_RATE_LIMIT_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "
    "If you reach out to GitHub Support for help, please include the request ID FAKE:0001.")
HUNK = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+(?P<new>\d+)(?:,\d+)? @@")
REVIEW_STATES = {"COMMENT": "COMMENTED", "APPROVE": "APPROVED",
                 "REQUEST_CHANGES": "CHANGES_REQUESTED", None: "PENDING"}


class ApiError(Exception):
    """An answer in GitHub's error shape, raised by a handler and sent by the dispatcher."""

    def __init__(self, status: int, message: str, errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message}
        if self.errors is not None:
            body["errors"] = self.errors
        return body | {"documentation_url": DOCS, "status": str(self.status)}


def invalid(*errors: Any) -> ApiError:
    return ApiError(422, "Validation Failed", list(errors))


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def blob_sha(data: bytes) -> str:
    """The git blob id, as GitHub reports a file's ``sha`` (and wants it back on update)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


# ---------------------------------------------------------------------------------------- state


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
    author: str
    at: str


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

    def commit(self, repo: Repo, parent: str | None, files: dict[str, bytes], message: str,
               author: str, sha: str | None = None) -> Commit:
        number = self.next_id()
        sha = sha or hashlib.sha1(f"{parent}:{message}:{author}:{number}".encode()).hexdigest()
        commit = Commit(sha, message, [parent] if parent else [], files, author, now())
        repo.commits[sha] = commit
        return commit

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


def diff_files(base: dict[str, bytes], head: dict[str, bytes]) -> list[dict[str, Any]]:
    """The files of a compare, each with GitHub's unified ``patch`` (hunks, no file headers)."""
    files = []
    for path in sorted(base.keys() | head.keys()):
        old, new = base.get(path), head.get(path)
        if old == new:
            continue
        lines = list(difflib.unified_diff((old or b"").decode(errors="replace").splitlines(),
                                          (new or b"").decode(errors="replace").splitlines(),
                                          lineterm="", n=3))[2:]
        additions = sum(line.startswith("+") for line in lines)
        deletions = sum(line.startswith("-") for line in lines)
        status = "added" if old is None else "removed" if new is None else "modified"
        files.append({"filename": path, "status": status, "additions": additions,
                      "deletions": deletions, "changes": additions + deletions,
                      "patch": "\n".join(lines), "sha": blob_sha(new or b"")})
    return files


def file_entry(entry: str | dict[str, Any]) -> dict[str, Any]:
    """A seeded PR file: a name (modified, no patch) or a dict of GitHub's File fields."""
    base = {"status": "modified", "additions": 0, "deletions": 0, "changes": 0}
    return base | ({"filename": entry} if isinstance(entry, str) else entry)


def diff_lines(patch: str | None) -> dict[str, set[int]] | None:
    """The lines a review comment may point at, per side; None when there is no patch."""
    if patch is None:
        return None
    sides: dict[str, set[int]] = {"LEFT": set(), "RIGHT": set()}
    old = new = 0
    for line in patch.splitlines():
        if match := HUNK.match(line):
            old, new = int(match["old"]), int(match["new"])
        elif line.startswith("+"):
            sides["RIGHT"].add(new)
            new += 1
        elif line.startswith("-"):
            sides["LEFT"].add(old)
            old += 1
        elif not line.startswith("\\"):
            sides["LEFT"].add(old)
            sides["RIGHT"].add(new)
            old, new = old + 1, new + 1
    return sides


# --------------------------------------------------------------------------------------- render


@dataclass
class Render:
    """GitHub's JSON for each object, with absolute URLs under this server's ``/api/v3``."""

    state: State
    api: str
    html: str
    viewer: User | None

    def user(self, login: str) -> dict[str, Any]:
        user = self.state.user(login)
        return {"login": login, "id": user.id, "node_id": f"U_{user.id}",
                "type": "Bot" if user.app else "User", "site_admin": False,
                "url": f"{self.api}/users/{login}", "html_url": f"{self.html}/{login}"}

    def repo(self, repo: Repo) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}"
        level = LEVELS[self.state.permission(self.viewer, repo)]
        body = {"id": repo.id, "node_id": f"R_{repo.id}", "name": repo.name,
                "full_name": repo.full_name, "owner": self.user(repo.owner),
                "private": repo.private, "fork": repo.parent is not None,
                "default_branch": repo.default_branch, "url": url,
                "html_url": f"{self.html}/{repo.full_name}",
                "clone_url": f"{self.html}/{repo.full_name}.git",
                "pulls_url": f"{url}/pulls{{/number}}", "issues_url": f"{url}/issues{{/number}}",
                "permissions": {"admin": level >= 3, "maintain": level >= 3, "push": level >= 2,
                                "triage": level >= 2, "pull": level >= 1}}
        if repo.parent:
            parent = self.state.repos[repo.parent]
            body["parent"] = body["source"] = {
                "id": parent.id, "full_name": parent.full_name, "name": parent.name,
                "owner": self.user(parent.owner), "url": f"{self.api}/repos/{parent.full_name}",
                "html_url": f"{self.html}/{parent.full_name}", "fork": False,
                "default_branch": parent.default_branch}
        return body

    def label(self, repo: Repo, name: str) -> dict[str, Any]:
        label = repo.labels[name]
        return {"id": label.id, "node_id": f"LA_{label.id}", "name": name, "color": label.color,
                "description": label.description, "default": False,
                "url": f"{self.api}/repos/{repo.full_name}/labels/{urllib.parse.quote(name)}"}

    def association(self, repo: Repo, login: str) -> str:
        if login == repo.owner:
            return "OWNER"
        return "COLLABORATOR" if LEVELS[self.state.user(login).permission] >= 2 else "NONE"

    def issue(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/issues/{issue.number}"
        kind = "pull" if issue.pull else "issues"
        body = {"id": issue.id, "node_id": f"I_{issue.id}", "number": issue.number,
                "title": issue.title, "body": issue.body, "state": issue.state,
                "state_reason": issue.state_reason, "locked": False, "url": url,
                "html_url": f"{self.html}/{repo.full_name}/{kind}/{issue.number}",
                "repository_url": f"{self.api}/repos/{repo.full_name}",
                "comments_url": f"{url}/comments", "events_url": f"{url}/events",
                "labels_url": f"{url}/labels{{/name}}", "user": self.user(issue.author),
                "labels": [self.label(repo, name) for name in issue.labels],
                "assignees": [], "assignee": None, "milestone": None,
                "comments": sum(c.number == issue.number for c in repo.comments.values()),
                "created_at": issue.created_at, "updated_at": issue.updated_at,
                "closed_at": issue.closed_at,
                "author_association": self.association(repo, issue.author)}
        if issue.pull:
            pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{issue.number}"
            body["pull_request"] = {"url": pull_url, "html_url": body["html_url"],
                                    "diff_url": f"{body['html_url']}.diff",
                                    "patch_url": f"{body['html_url']}.patch", "merged_at": None}
        return body

    def pull(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        pull = issue.pull
        assert pull is not None
        head = self.state.repos[pull.head_repo]
        url = f"{self.api}/repos/{repo.full_name}/pulls/{issue.number}"
        files = self.state.pull_files(repo, issue)
        body = self.issue(repo, issue)
        del body["pull_request"]
        return body | {
            "url": url, "issue_url": f"{self.api}/repos/{repo.full_name}/issues/{issue.number}",
            "diff_url": f"{body['html_url']}.diff", "patch_url": f"{body['html_url']}.patch",
            "commits_url": f"{url}/commits", "review_comments_url": f"{url}/comments",
            "review_comment_url": f"{self.api}/repos/{repo.full_name}/pulls/comments{{/number}}",
            "statuses_url": f"{self.api}/repos/{repo.full_name}/statuses/{head_sha(self.state, issue)}",
            "head": self.part(head, pull.head_ref, head_sha(self.state, issue)),
            "base": self.part(repo, pull.base_ref, repo.resolve(pull.base_ref) or ""),
            "draft": pull.draft, "merged": False, "merged_at": None, "merged_by": None,
            "mergeable": None, "maintainer_can_modify": pull.maintainer_can_modify,
            "review_comments": sum(c.number == issue.number for c in repo.review_comments.values()),
            "commits": 1, "changed_files": len(files),
            "additions": sum(f["additions"] for f in files),
            "deletions": sum(f["deletions"] for f in files)}

    def part(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        return {"label": f"{repo.owner}:{ref}", "ref": ref, "sha": sha,
                "user": self.user(repo.owner), "repo": self.repo(repo)}

    def comment(self, repo: Repo, comment: Comment) -> dict[str, Any]:
        issue = repo.issues[comment.number]
        html = self.issue(repo, issue)["html_url"]
        return {"id": comment.id, "node_id": f"IC_{comment.id}", "body": comment.body,
                "url": f"{self.api}/repos/{repo.full_name}/issues/comments/{comment.id}",
                "html_url": f"{html}#issuecomment-{comment.id}",
                "issue_url": f"{self.api}/repos/{repo.full_name}/issues/{comment.number}",
                "user": self.user(comment.author), "created_at": comment.created_at,
                "updated_at": comment.updated_at,
                "author_association": self.association(repo, comment.author)}

    def review(self, repo: Repo, review: Review) -> dict[str, Any]:
        pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{review.number}"
        html = f"{self.html}/{repo.full_name}/pull/{review.number}"
        return {"id": review.id, "node_id": f"PRR_{review.id}", "user": self.user(review.author),
                "body": review.body, "state": review.state, "commit_id": review.commit_id,
                "submitted_at": review.submitted_at, "pull_request_url": pull_url,
                "html_url": f"{html}#pullrequestreview-{review.id}",
                "author_association": self.association(repo, review.author)}

    def review_comment(self, repo: Repo, comment: ReviewComment) -> dict[str, Any]:
        pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{comment.number}"
        url = f"{self.api}/repos/{repo.full_name}/pulls/comments/{comment.id}"
        html = f"{self.html}/{repo.full_name}/pull/{comment.number}#discussion_r{comment.id}"
        return {"id": comment.id, "node_id": f"PRRC_{comment.id}", "url": url, "html_url": html,
                "pull_request_url": pull_url, "pull_request_review_id": comment.review_id,
                "path": comment.path, "line": comment.line, "original_line": comment.line,
                "side": comment.side, "position": None, "subject_type": "line",
                "commit_id": comment.commit_id, "original_commit_id": comment.commit_id,
                "body": comment.body, "user": self.user(comment.author), "diff_hunk": "",
                "in_reply_to_id": comment.in_reply_to, "created_at": comment.created_at,
                "updated_at": comment.updated_at,
                "author_association": self.association(repo, comment.author),
                "_links": {"self": {"href": url}, "html": {"href": html},
                           "pull_request": {"href": pull_url}}}

    def event(self, repo: Repo, event: IssueEvent) -> dict[str, Any]:
        body = {"id": event.id, "node_id": f"LE_{event.id}", "event": event.event,
                "url": f"{self.api}/repos/{repo.full_name}/issues/events/{event.id}",
                "actor": self.user(event.actor), "commit_id": None, "commit_url": None,
                "created_at": event.created_at, "performed_via_github_app": None}
        if event.label is not None:
            body["label"] = {"name": event.label, "color": repo.label(event.label, self.state.next_id).color}
        return body

    def commit(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/commits/{commit.sha}"
        person = {"name": commit.author, "email": f"{commit.author}@users.noreply.github.com",
                  "date": commit.at}
        return {"sha": commit.sha, "node_id": f"C_{commit.sha}", "url": url,
                "html_url": f"{self.html}/{repo.full_name}/commit/{commit.sha}",
                "commit": {"message": commit.message, "author": person, "committer": person,
                           "url": f"{self.api}/repos/{repo.full_name}/git/commits/{commit.sha}",
                           "tree": {"sha": commit.sha, "url": url}},
                "author": self.user(commit.author), "committer": self.user(commit.author),
                "parents": [{"sha": sha, "url": f"{self.api}/repos/{repo.full_name}/commits/{sha}"}
                            for sha in commit.parents], "files": []}

    def ref(self, repo: Repo, ref: str) -> dict[str, Any]:
        sha = repo.refs[ref]
        return {"ref": ref, "node_id": f"REF_{ref}",
                "url": f"{self.api}/repos/{repo.full_name}/git/{ref}",
                "object": {"type": "commit", "sha": sha,
                           "url": f"{self.api}/repos/{repo.full_name}/git/commits/{sha}"}}

    def branch(self, repo: Repo, name: str) -> dict[str, Any]:
        commit = repo.commits[repo.refs[f"refs/heads/{name}"]]
        url = f"{self.api}/repos/{repo.full_name}/branches/{name}"
        return {"name": name, "commit": self.commit(repo, commit), "protected": False,
                "_links": {"self": url, "html": f"{self.html}/{repo.full_name}/tree/{name}"}}

    def content(self, repo: Repo, path: str, data: bytes, ref: str) -> dict[str, Any]:
        sha = blob_sha(data)
        url = f"{self.api}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        html = f"{self.html}/{repo.full_name}/blob/{ref}/{path}"
        git = f"{self.api}/repos/{repo.full_name}/git/blobs/{sha}"
        encoded = base64.encodebytes(data).decode()  # GitHub wraps the base64 at 60 columns too
        return {"type": "file", "encoding": "base64", "size": len(data),
                "name": path.rsplit("/", 1)[-1], "path": path, "content": encoded, "sha": sha,
                "url": url, "git_url": git, "html_url": html,
                "download_url": f"{self.html}/{repo.full_name}/raw/{ref}/{path}",
                "_links": {"self": url, "git": git, "html": html}}

    def entry(self, repo: Repo, path: str, kind: str, ref: str) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        return {"type": kind, "name": path.rsplit("/", 1)[-1], "path": path, "url": url,
                "sha": hashlib.sha1(path.encode()).hexdigest(), "size": 0,
                "html_url": f"{self.html}/{repo.full_name}/tree/{ref}/{path}"}


# --------------------------------------------------------------------------------------- routes


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Call:
    """One request as a handler sees it: the state (under the server's lock) and the caller."""

    state: State
    render: Render
    method: str
    path: str  # under /api/v3, without the query
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    user: User | None

    @property
    def repo(self) -> Repo:
        return self.state.repo(f"{self.params['owner']}/{self.params['name']}")

    def field(self, name: str) -> Any:
        if not isinstance(self.body, dict) or name not in self.body:
            raise invalid({"resource": "Request", "field": name, "code": "missing_field"})
        return self.body[name]

    def login(self) -> str:
        assert self.user is not None, "writes are authenticated before a handler runs"
        return self.user.login


Handler = Callable[[Call], Reply]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    write: bool  # needs a token with write permission on the repository


ROUTES: list[Route] = []
REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"


def route(method: str, pattern: str, *, write: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES.append(Route(method, re.compile(f"^{pattern}$"), handler, write))
        return handler
    return register


def paged(call: Call, items: list[Any]) -> Reply:
    """One page of ``items`` with GitHub's ``Link`` header (first/prev/next/last), 30 a page."""
    per_page = max(1, min(int(call.query.get("per_page", 30)), 100))
    page = max(1, int(call.query.get("page", 1)))
    last = max(1, -(-len(items) // per_page))

    def link(number: int, rel: str) -> str:
        query = urllib.parse.urlencode(sorted((call.query | {"page": str(number)}).items()))
        return f'<{call.render.api}{call.path}?{query}>; rel="{rel}"'

    links = []
    if page > 1:
        links += [link(page - 1, "prev"), link(1, "first")]
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    chunk = items[(page - 1) * per_page:page * per_page]
    return Reply(200, chunk, {"link": ", ".join(links)} if links else {})


@route("GET", "/user")
def get_authenticated_user(call: Call) -> Reply:
    if call.user is None:
        raise ApiError(401, "Requires authentication")
    if call.user.app:
        raise ApiError(403, "Resource not accessible by integration")
    return Reply(200, call.render.user(call.user.login))


@route("GET", r"/users/(?P<login>[^/]+)")
def get_user(call: Call) -> Reply:
    if call.params["login"] not in call.state.users:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.user(call.params["login"]))


@route("GET", "/rate_limit")
def get_rate_limit(call: Call) -> Reply:
    core = {"limit": RATE_LIMIT, "remaining": call.state.rate_remaining,
            "reset": call.state.rate_reset, "used": RATE_LIMIT - call.state.rate_remaining}
    return Reply(200, {"resources": {"core": core, "search": core, "graphql": core}, "rate": core})


@route("GET", REPO)
def get_repo(call: Call) -> Reply:
    return Reply(200, call.render.repo(call.repo))


@route("GET", REPO + r"/collaborators/(?P<login>[^/]+)/permission")
def get_permission(call: Call) -> Reply:
    login = call.params["login"]
    permission = call.state.permission(call.state.user(login), call.repo)
    return Reply(200, {"permission": permission, "role_name": permission,
                       "user": call.render.user(login)})


@route("GET", REPO + "/branches")
def list_branches(call: Call) -> Reply:
    repo = call.repo
    names = sorted(ref.removeprefix("refs/heads/") for ref in repo.refs if ref.startswith("refs/heads/"))
    return paged(call, [call.render.branch(repo, name) for name in names])


@route("GET", REPO + r"/branches/(?P<branch>.+)")
def get_branch(call: Call) -> Reply:
    repo, branch = call.repo, call.params["branch"]
    if f"refs/heads/{branch}" not in repo.refs:
        raise ApiError(404, "Branch not found")
    return Reply(200, call.render.branch(repo, branch))


@route("GET", REPO + r"/commits/(?P<ref>.+)")
def get_commit(call: Call) -> Reply:
    repo = call.repo
    sha = repo.resolve(call.params["ref"])
    if sha is None:
        raise ApiError(422, f"No commit found for SHA: {call.params['ref']}")
    return Reply(200, call.render.commit(repo, repo.commits[sha]))


@route("GET", REPO + r"/git/refs?/(?P<ref>.+)")
def get_ref(call: Call) -> Reply:
    repo, ref = call.repo, "refs/" + call.params["ref"]
    if ref not in repo.refs:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.ref(repo, ref))


@route("POST", REPO + "/git/refs", write=True)
def create_ref(call: Call) -> Reply:
    repo, ref, sha = call.repo, call.field("ref"), call.field("sha")
    if not ref.startswith("refs/") or ref.count("/") < 2:
        raise ApiError(422, "Reference name must start with 'refs/' and have at least two slashes.")
    if ref in repo.refs:
        raise ApiError(422, "Reference already exists")
    if sha not in repo.commits:
        raise ApiError(422, "Object does not exist")
    repo.refs[ref] = sha
    return Reply(201, call.render.ref(repo, ref))


@route("PATCH", REPO + r"/git/refs/(?P<ref>.+)", write=True)
def update_ref(call: Call) -> Reply:
    repo, ref, sha = call.repo, "refs/" + call.params["ref"], call.field("sha")
    if ref not in repo.refs:
        raise ApiError(422, "Reference does not exist")
    if sha not in repo.commits:
        raise ApiError(422, "Object does not exist")
    if not call.body.get("force") and not repo.is_ancestor(repo.refs[ref], sha):
        raise ApiError(422, "Update is not a fast forward")
    repo.refs[ref] = sha
    return Reply(200, call.render.ref(repo, ref))


@route("DELETE", REPO + r"/git/refs/(?P<ref>.+)", write=True)
def delete_ref(call: Call) -> Reply:
    repo, ref = call.repo, "refs/" + call.params["ref"]
    if repo.refs.pop(ref, None) is None:
        raise ApiError(422, "Reference does not exist")
    return Reply(204)


@route("GET", REPO + r"/contents/?(?P<path>.*)")
def get_contents(call: Call) -> Reply:
    repo, path = call.repo, call.params["path"].strip("/")
    ref = call.query.get("ref", repo.default_branch)
    tree = repo.tree(ref)
    if path in tree:
        return Reply(200, call.render.content(repo, path, tree[path], ref))
    prefix = f"{path}/" if path else ""
    children = {p[len(prefix):].split("/")[0]: "/" in p[len(prefix):]
                for p in tree if p.startswith(prefix)}
    if not children:
        raise ApiError(404, "Not Found")
    return Reply(200, [call.render.entry(repo, prefix + name, "dir" if is_dir else "file", ref)
                       for name, is_dir in sorted(children.items())])


def commit_file(call: Call, path: str, data: bytes | None) -> tuple[Repo, Commit, bool]:
    """A commit on the request's branch that writes (or, with None, deletes) ``path``; whether
    the file existed before."""
    repo = call.repo
    branch = call.body.get("branch") or repo.default_branch
    ref = f"refs/heads/{branch}"
    if ref not in repo.refs:
        raise ApiError(404, f"Branch {branch} not found")
    tree = repo.commits[repo.refs[ref]].files
    given = call.body.get("sha")
    if path in tree and given is None:
        raise ApiError(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
    if path in tree and given != blob_sha(tree[path]):
        raise ApiError(409, f"{path} does not match {given}")
    if path not in tree and data is None:
        raise ApiError(404, "Not Found")
    files = {p: d for p, d in tree.items() if p != path} | ({path: data} if data is not None else {})
    commit = call.state.commit(repo, repo.refs[ref], files, call.field("message"), call.login())
    repo.refs[ref] = commit.sha
    return repo, commit, path in tree


@route("PUT", REPO + r"/contents/(?P<path>.+)", write=True)
def put_contents(call: Call) -> Reply:
    path = call.params["path"].strip("/")
    data = base64.b64decode(call.field("content"))
    repo, commit, existed = commit_file(call, path, data)
    return Reply(200 if existed else 201,
                 {"content": call.render.content(repo, path, data, commit.sha),
                  "commit": call.render.commit(repo, commit)})


@route("DELETE", REPO + r"/contents/(?P<path>.+)", write=True)
def delete_contents(call: Call) -> Reply:
    repo, commit, _ = commit_file(call, call.params["path"].strip("/"), None)
    return Reply(200, {"content": None, "commit": call.render.commit(repo, commit)})


@route("GET", REPO + "/labels")
def list_repo_labels(call: Call) -> Reply:
    repo = call.repo
    return paged(call, [call.render.label(repo, name) for name in sorted(repo.labels)])


@route("POST", REPO + "/labels", write=True)
def create_repo_label(call: Call) -> Reply:
    repo, name = call.repo, call.field("name")
    if name in repo.labels:
        raise invalid({"resource": "Label", "code": "already_exists", "field": "name"})
    label = repo.label(name, call.state.next_id)
    label.color, label.description = call.body.get("color", label.color), call.body.get("description", "")
    return Reply(201, call.render.label(repo, name))


def issue_filter(call: Call, issue: Issue) -> bool:
    state = call.query.get("state", "open")
    labels = [name for name in call.query.get("labels", "").split(",") if name]
    creator = call.query.get("creator")
    return ((state == "all" or issue.state == state) and all(n in issue.labels for n in labels)
            and (creator is None or issue.author == creator))


@route("GET", REPO + "/issues")
def list_issues(call: Call) -> Reply:
    """Pull requests are listed too, with a ``pull_request`` key, as GitHub lists them."""
    repo = call.repo
    issues = sorted((i for i in repo.issues.values() if issue_filter(call, i)),
                    key=lambda i: i.number, reverse=call.query.get("direction", "desc") == "desc")
    return paged(call, [call.render.issue(repo, issue) for issue in issues])


def new_issue(state: State, repo: Repo, title: str, body: str | None, author: str,
              labels: Iterable[str], pull: PullInfo | None = None, number: int | None = None
              ) -> Issue:
    number = number or max(repo.issues, default=0) + 1
    assert number not in repo.issues, f"#{number} exists in {repo.full_name}"
    names = [repo.label(name, state.next_id).name for name in labels]
    issue = Issue(number, state.next_id(), title, body, author, names, now(), now(), pull=pull)
    repo.issues[number] = issue
    return issue


@route("POST", REPO + "/issues", write=True)
def create_issue(call: Call) -> Reply:
    repo = call.repo
    issue = new_issue(call.state, repo, call.field("title"), call.body.get("body"), call.login(),
                      call.body.get("labels", []))
    return Reply(201, call.render.issue(repo, issue))


@route("GET", REPO + r"/issues/(?P<number>\d+)")
def get_issue(call: Call) -> Reply:
    repo = call.repo
    return Reply(200, call.render.issue(repo, repo.issue(call.params["number"])))


def set_labels(call: Call, issue: Issue, names: list[str]) -> None:
    """Replace the labels, recording ``labeled``/``unlabeled`` events as GitHub does."""
    repo = call.repo
    for name in [n for n in issue.labels if n not in names]:
        repo.events.append(IssueEvent(call.state.next_id(), issue.number, "unlabeled",
                                      call.login(), name, now()))
    for name in [n for n in names if n not in issue.labels]:
        repo.label(name, call.state.next_id)
        repo.events.append(IssueEvent(call.state.next_id(), issue.number, "labeled",
                                      call.login(), name, now()))
    issue.labels = list(dict.fromkeys(names))


def set_state(call: Call, issue: Issue, state: str, reason: str | None) -> None:
    if state == issue.state:
        return
    issue.state, issue.state_reason = state, reason or ("completed" if state == "closed" else None)
    issue.closed_at = now() if state == "closed" else None
    call.repo.events.append(IssueEvent(call.state.next_id(), issue.number,
                                       "closed" if state == "closed" else "reopened",
                                       call.login(), None, now()))


def edit_issue_fields(call: Call, issue: Issue) -> None:
    body = call.body
    issue.title = body.get("title", issue.title)
    issue.body = body.get("body", issue.body)
    if "labels" in body:
        set_labels(call, issue, body["labels"])
    if "state" in body:
        set_state(call, issue, body["state"], body.get("state_reason"))
    issue.updated_at = now()


@route("PATCH", REPO + r"/issues/(?P<number>\d+)", write=True)
def edit_issue(call: Call) -> Reply:
    repo = call.repo
    issue = repo.issue(call.params["number"])
    edit_issue_fields(call, issue)
    return Reply(200, call.render.issue(repo, issue))


@route("GET", REPO + r"/issues/(?P<number>\d+)/labels")
def list_issue_labels(call: Call) -> Reply:
    repo = call.repo
    return paged(call, [call.render.label(repo, n) for n in repo.issue(call.params["number"]).labels])


@route("POST", REPO + r"/issues/(?P<number>\d+)/labels", write=True)
@route("PUT", REPO + r"/issues/(?P<number>\d+)/labels", write=True)
def add_issue_labels(call: Call) -> Reply:
    """POST adds, PUT replaces; the body is a list or ``{"labels": [...]}``."""
    repo = call.repo
    issue = repo.issue(call.params["number"])
    names = call.body["labels"] if isinstance(call.body, dict) else list(call.body or [])
    set_labels(call, issue, names if call.method == "PUT" else issue.labels + names)
    return Reply(200, [call.render.label(repo, n) for n in issue.labels])


@route("DELETE", REPO + r"/issues/(?P<number>\d+)/labels/(?P<label>[^/]+)", write=True)
def remove_issue_label(call: Call) -> Reply:
    repo = call.repo
    issue = repo.issue(call.params["number"])
    if call.params["label"] not in issue.labels:
        raise ApiError(404, "Label does not exist")
    set_labels(call, issue, [n for n in issue.labels if n != call.params["label"]])
    return Reply(200, [call.render.label(repo, n) for n in issue.labels])


@route("GET", REPO + r"/issues/(?P<number>\d+)/events")
def list_issue_events(call: Call) -> Reply:
    repo = call.repo
    number = repo.issue(call.params["number"]).number
    return paged(call, [call.render.event(repo, e) for e in repo.events if e.number == number])


@route("GET", REPO + r"/issues/(?P<number>\d+)/comments")
def list_issue_comments(call: Call) -> Reply:
    repo = call.repo
    number = repo.issue(call.params["number"]).number
    return paged(call, [call.render.comment(repo, c) for c in repo.comments.values()
                        if c.number == number])


@route("POST", REPO + r"/issues/(?P<number>\d+)/comments", write=True)
def create_issue_comment(call: Call) -> Reply:
    repo = call.repo
    number = repo.issue(call.params["number"]).number
    comment = Comment(call.state.next_id(), number, call.field("body"), call.login(), now(), now())
    repo.comments[comment.id] = comment
    return Reply(201, call.render.comment(repo, comment))


def find_comment(call: Call) -> tuple[Repo, Comment]:
    repo = call.repo
    comment = repo.comments.get(int(call.params["id"]))
    if comment is None:
        raise ApiError(404, "Not Found")
    return repo, comment


@route("GET", REPO + r"/issues/comments/(?P<id>\d+)")
def get_issue_comment(call: Call) -> Reply:
    return Reply(200, call.render.comment(*find_comment(call)))


@route("PATCH", REPO + r"/issues/comments/(?P<id>\d+)", write=True)
def edit_issue_comment(call: Call) -> Reply:
    repo, comment = find_comment(call)
    comment.body, comment.updated_at = call.field("body"), now()
    return Reply(200, call.render.comment(repo, comment))


@route("DELETE", REPO + r"/issues/comments/(?P<id>\d+)", write=True)
def delete_issue_comment(call: Call) -> Reply:
    repo, comment = find_comment(call)
    del repo.comments[comment.id]
    return Reply(204)


def pull_filter(call: Call, repo: Repo, issue: Issue) -> bool:
    pull = issue.pull
    if pull is None:
        return False
    state = call.query.get("state", "open")
    owner, _, ref = call.query.get("head", "").rpartition(":")
    head_owner = call.state.repos[pull.head_repo].owner
    return ((state == "all" or issue.state == state)
            and (not ref or (pull.head_ref == ref and owner in ("", head_owner)))
            and call.query.get("base", pull.base_ref) == pull.base_ref)


@route("GET", REPO + "/pulls")
def list_pulls(call: Call) -> Reply:
    repo = call.repo
    pulls = sorted((i for i in repo.issues.values() if pull_filter(call, repo, i)),
                   key=lambda i: i.number, reverse=call.query.get("direction", "desc") == "desc")
    return paged(call, [call.render.pull(repo, issue) for issue in pulls])


def head_repo_of(state: State, repo: Repo, owner: str) -> Repo:
    """The repository a PR's ``head`` names: this one, or a fork of it owned by ``owner``."""
    if owner in ("", repo.owner):
        return repo
    fork = state.repos.get(f"{owner}/{repo.name}")
    if fork is None or fork.parent != repo.full_name:
        raise invalid({"resource": "PullRequest", "field": "head", "code": "invalid"})
    return fork


@route("POST", REPO + "/pulls", write=True)
def create_pull(call: Call) -> Reply:
    repo, head, base = call.repo, call.field("head"), call.field("base")
    owner, _, ref = head.rpartition(":")
    head_repo = head_repo_of(call.state, repo, owner)
    for name, branch, where in (("base", base, repo), ("head", ref, head_repo)):
        if f"refs/heads/{branch}" not in where.refs:
            raise invalid({"resource": "PullRequest", "field": name, "code": "invalid"})
    title = call.field("title")
    for issue in repo.issues.values():
        if (issue.state == "open" and issue.pull and issue.pull.head_repo == head_repo.full_name
                and issue.pull.head_ref == ref and issue.pull.base_ref == base):
            raise invalid({"resource": "PullRequest", "code": "custom",
                           "message": f"A pull request already exists for {head_repo.owner}:{ref}."})
    tip = head_repo.refs[f"refs/heads/{ref}"]
    if repo.is_ancestor(tip, repo.refs[f"refs/heads/{base}"]):
        raise invalid({"resource": "PullRequest", "code": "custom",
                       "message": f"No commits between {base} and {head}"})
    pull = PullInfo(head_repo.full_name, ref, base, tip, draft=bool(call.body.get("draft")),
                    maintainer_can_modify=bool(call.body.get("maintainer_can_modify")))
    issue = new_issue(call.state, repo, title, call.body.get("body"), call.login(), [], pull)
    return Reply(201, call.render.pull(repo, issue))


@route("GET", REPO + r"/pulls/(?P<number>\d+)")
def get_pull(call: Call) -> Reply:
    repo = call.repo
    return Reply(200, call.render.pull(repo, repo.pull(call.params["number"])))


@route("PATCH", REPO + r"/pulls/(?P<number>\d+)", write=True)
def edit_pull(call: Call) -> Reply:
    repo = call.repo
    issue = repo.pull(call.params["number"])
    assert issue.pull is not None
    if "base" in call.body:
        if f"refs/heads/{call.body['base']}" not in repo.refs:
            raise invalid({"resource": "PullRequest", "field": "base", "code": "invalid"})
        issue.pull.base_ref = call.body["base"]
    edit_issue_fields(call, issue)
    return Reply(200, call.render.pull(repo, issue))


@route("GET", REPO + r"/pulls/(?P<number>\d+)/files")
def list_pull_files(call: Call) -> Reply:
    repo = call.repo
    return paged(call, call.state.pull_files(repo, repo.pull(call.params["number"])))


@route("GET", REPO + r"/pulls/(?P<number>\d+)/reviews")
def list_reviews(call: Call) -> Reply:
    repo = call.repo
    number = repo.pull(call.params["number"]).number
    return paged(call, [call.render.review(repo, r) for r in repo.reviews.values()
                        if r.number == number])


def check_line(call: Call, issue: Issue, comment: dict[str, Any]) -> None:
    """GitHub's 422 for a review comment whose path or line is not in the PR's diff."""
    files = {f["filename"]: f for f in call.state.pull_files(call.repo, issue)}
    if comment.get("path") not in files:
        raise ApiError(422, "Unprocessable Entity", ["Path could not be resolved"])
    sides = diff_lines(files[comment["path"]].get("patch"))
    line = comment.get("line")
    if sides is not None and line not in sides.get(comment.get("side", "RIGHT"), set()):
        raise ApiError(422, "Unprocessable Entity", ["Line could not be resolved"])


def new_review_comment(call: Call, issue: Issue, comment: dict[str, Any],
                       review_id: int | None, commit_id: str) -> ReviewComment:
    stamp = now()
    created = ReviewComment(call.state.next_id(), issue.number, review_id, comment["path"],
                            comment["line"], comment.get("side", "RIGHT"), comment["body"],
                            commit_id, call.login(), stamp, stamp, comment.get("in_reply_to"))
    call.repo.review_comments[created.id] = created
    return created


@route("POST", REPO + r"/pulls/(?P<number>\d+)/reviews", write=True)
def create_review(call: Call) -> Reply:
    repo = call.repo
    issue = repo.pull(call.params["number"])
    event = call.body.get("event")
    if event not in REVIEW_STATES:
        raise invalid({"resource": "PullRequestReview", "field": "event", "code": "invalid"})
    if event in ("APPROVE", "REQUEST_CHANGES") and issue.author == call.login():
        verb = "approve" if event == "APPROVE" else "request changes on"
        raise ApiError(422, "Unprocessable Entity", [f"Can not {verb} your own pull request"])
    comments = call.body.get("comments") or []
    for comment in comments:
        check_line(call, issue, comment)
    commit_id = call.body.get("commit_id") or head_sha(call.state, issue)
    review = Review(call.state.next_id(), issue.number, call.login(), call.body.get("body") or "",
                    REVIEW_STATES[event], commit_id, now())
    repo.reviews[review.id] = review
    for comment in comments:
        new_review_comment(call, issue, comment, review.id, commit_id)
    return Reply(200, call.render.review(repo, review))


@route("GET", REPO + r"/pulls/(?P<number>\d+)/comments")
def list_review_comments(call: Call) -> Reply:
    repo = call.repo
    number = repo.pull(call.params["number"]).number
    return paged(call, [call.render.review_comment(repo, c) for c in repo.review_comments.values()
                        if c.number == number])


@route("POST", REPO + r"/pulls/(?P<number>\d+)/comments", write=True)
def create_review_comment(call: Call) -> Reply:
    repo = call.repo
    issue = repo.pull(call.params["number"])
    check_line(call, issue, call.body)
    commit_id = call.body.get("commit_id") or head_sha(call.state, issue)
    created = new_review_comment(call, issue, call.body, None, commit_id)
    return Reply(201, call.render.review_comment(repo, created))


def find_review_comment(call: Call) -> tuple[Repo, ReviewComment]:
    repo = call.repo
    comment = repo.review_comments.get(int(call.params["id"]))
    if comment is None:
        raise ApiError(404, "Not Found")
    return repo, comment


@route("GET", REPO + r"/pulls/comments/(?P<id>\d+)")
def get_review_comment(call: Call) -> Reply:
    return Reply(200, call.render.review_comment(*find_review_comment(call)))


@route("PATCH", REPO + r"/pulls/comments/(?P<id>\d+)", write=True)
def edit_review_comment(call: Call) -> Reply:
    repo, comment = find_review_comment(call)
    comment.body, comment.updated_at = call.field("body"), now()
    return Reply(200, call.render.review_comment(repo, comment))


@route("DELETE", REPO + r"/pulls/comments/(?P<id>\d+)", write=True)
def delete_review_comment(call: Call) -> Reply:
    repo, comment = find_review_comment(call)
    del repo.review_comments[comment.id]
    return Reply(204)


# --------------------------------------------------------------------------------------- server


@dataclass
class RecordedRequest:
    """One request as the server received it, and the status it got."""

    method: str
    path: str  # under /api/v3, without the query
    query: dict[str, str]
    body: Any  # the parsed JSON, or the raw text
    login: str | None  # whose token it carried (None: no token or an unknown one)
    status: int = 0
    at: float = 0.0  # time.monotonic() on arrival


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    reply: Reply
    times: int


@dataclass
class FakeGitHub:
    """The server; use as a context manager (or the ``fake_github`` fixture)."""

    lifetime_s: float = 120.0
    state: State = field(default_factory=State)
    requests: list[RecordedRequest] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # the fake's own bugs, as 500s
    _faults: list[Fault] = field(default_factory=list)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _server: ThreadingHTTPServer | None = None
    _timer: threading.Timer | None = None
    _port: int = 0  # kept after stop, so URLs can still be named

    # -- lifecycle

    @property
    def root(self) -> str:
        assert self._port, "start the server first"
        return f"http://127.0.0.1:{self._port}"

    @property
    def base_url(self) -> str:
        """What ``Github(base_url=...)`` and ``GITHUB_API_URL`` take, GitHub Enterprise style."""
        return self.root + API_PREFIX

    def start(self) -> FakeGitHub:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.fake = self  # type: ignore[attr-defined]
        self._server, self._port = server, server.server_address[1]
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         name="fake-github", daemon=True).start()
        self._timer = threading.Timer(self.lifetime_s, self.stop)
        self._timer.daemon = True
        self._timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def client(self, token: str | None = None, **options: Any) -> github.Github:
        """A PyGithub client for this server, with settings that keep tests fast.

        PyGithub waits 0.25 s between requests and 1 s between writes by default, and its
        default retry sleeps 60 s on a secondary rate limit without ``Retry-After``; here both
        are off or short (override any of them through ``options``).
        """
        import github

        settings: dict[str, Any] = {
            "base_url": self.base_url, "timeout": 10, "seconds_between_requests": None,
            "seconds_between_writes": None,
            "retry": github.GithubRetry(total=3, secondary_rate_wait=0.01)}
        settings.update(options)
        return github.Github(auth=github.Auth.Token(token) if token else None, **settings)

    # -- seeding

    def add_user(self, token: str | None, login: str, permission: str = "write",
                 app: bool | None = None) -> User:
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

    def add_repo(self, full_name: str, default_branch: str = "main",
                 files: dict[str, str | bytes] | None = None, private: bool = False) -> Repo:
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
        """``owner``'s fork of ``full_name``: same branches, commits shared with the parent."""
        with self._lock:
            parent = self.state.repo(full_name)
            name = f"{owner}/{parent.name}"
            if name not in self.state.repos:
                self.state.repos[name] = Repo(name, self.state.next_id(), parent.default_branch,
                                              parent.private, parent.full_name,
                                              dict(parent.refs), parent.commits)
                self.state.user(owner)
            return self.state.repos[name]

    def push(self, full_name: str, branch: str, files: dict[str, str | bytes] | None = None,
             message: str = "push", author: str | None = None, sha: str | None = None,
             start: str | None = None) -> str:
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

    def add_pull(self, full_name: str, number: int | None = None, head_ref: str = "feature",
                 base_ref: str | None = None, head_sha: str | None = None, fork: bool = False,
                 labels: Iterable[str] = (), files: list[str | dict[str, Any]] | None = None,
                 author: str = "contributor", title: str = "A change", body: str = "",
                 head_files: dict[str, str | bytes] | None = None) -> Issue:
        """An open PR from ``head_ref`` (in ``author``'s fork when ``fork``) into ``base_ref``.

        The head gets a new commit (sha ``head_sha`` if given) holding ``head_files``. The PR's
        files are ``files`` if given (names or dicts of GitHub's File fields), else the diff of
        the base and head trees, patches included.
        """
        with self._lock:
            repo = self.state.repo(full_name)
            head_repo = self.fork(full_name, author) if fork else repo
            base_ref = base_ref or repo.default_branch
            sha = self.push(head_repo.full_name, head_ref, head_files, f"{title} (head)", author,
                            head_sha, start=base_ref)
            pull = PullInfo(head_repo.full_name, head_ref, base_ref, sha,
                            [file_entry(f) for f in files] if files is not None else None)
            issue = new_issue(self.state, repo, title, body, author, labels, pull, number)
            self.state.user(author)
            return issue

    def add_comment(self, full_name: str, number: int, body: str, author: str) -> Comment:
        with self._lock:
            repo = self.state.repo(full_name)
            stamp = now()
            comment = Comment(self.state.next_id(), repo.issue(number).number, body, author,
                              stamp, stamp)
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

    def pull_event(self, full_name: str, number: int, action: str = "opened",
                   label: str | None = None, sender: str | None = None) -> dict[str, Any]:
        """The ``pull_request`` webhook payload (what ``GITHUB_EVENT_PATH`` holds) for a PR."""
        with self._lock:
            repo = self.state.repo(full_name)
            issue = repo.pull(number)
            render = Render(self.state, self.base_url, self.root, None)
            payload = {"action": action, "number": number, "pull_request": render.pull(repo, issue),
                       "repository": render.repo(repo), "sender": render.user(sender or issue.author)}
            if label is not None:
                payload["label"] = render.label(repo, repo.label(label, self.state.next_id).name)
            return payload

    # -- faults and reading back

    def fail_next(self, method: str, path_pattern: str, status: int, body: Any = None, *,
                  times: int = 1, headers: dict[str, str] | None = None) -> None:
        """Answer the next ``times`` requests of ``method`` whose path (under /api/v3, without
        the query) matches the regex ``path_pattern`` with ``status``; ``body`` is a message, a
        dict, or None for GitHub's body for that status."""
        if body is None or isinstance(body, str):
            body = ApiError(status, body or HTTPStatus(status).phrase).body()
        with self._lock:
            self._faults.append(Fault(method.upper(), re.compile(path_pattern),
                                      Reply(status, body, dict(headers or {})), times))

    def secondary_rate_limit(self, method: str, path_pattern: str,
                             retry_after: int | None = None, times: int = 1) -> None:
        """GitHub's 403 for a secondary rate limit, with ``retry-after`` when given."""
        headers = {} if retry_after is None else {"retry-after": str(retry_after)}
        self.fail_next(method, path_pattern, 403, SECONDARY_RATE_LIMIT_MESSAGE, times=times,
                       headers=headers)

    def calls(self, method: str, path_pattern: str = "") -> list[RecordedRequest]:
        """The recorded requests of ``method`` whose path matches ``path_pattern``."""
        with self._lock:
            return [r for r in self.requests
                    if r.method == method.upper() and re.search(path_pattern, r.path)]

    def repo(self, full_name: str) -> Repo:
        return self.state.repo(full_name)

    def issue(self, full_name: str, number: int) -> Issue:
        return self.repo(full_name).issue(number)

    def comments(self, full_name: str, number: int) -> list[Comment]:
        return [c for c in self.repo(full_name).comments.values() if c.number == number]

    def file(self, full_name: str, path: str, ref: str | None = None) -> bytes | None:
        repo = self.repo(full_name)
        return repo.tree(ref or repo.default_branch).get(path)

    # -- dispatch

    def handle(self, method: str, target: str, body: Any, token: str | None) -> Reply:
        url = urllib.parse.urlsplit(target)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        path = url.path.removeprefix(API_PREFIX) if url.path.startswith(API_PREFIX) else None
        with self._lock:
            user = self.state.users.get(self.state.tokens.get(token or "", ""))
            record = RecordedRequest(method, path or url.path, query, body,
                                     user.login if user else None, at=time.monotonic())
            self.requests.append(record)
            self.state.rate_remaining = max(0, self.state.rate_remaining - 1)
            reply = self._reply(method, path, query, body, token, user)
            record.status = reply.status
            reply.headers = self._rate_headers() | reply.headers
            return reply

    def _reply(self, method: str, path: str | None, query: dict[str, str], body: Any,
               token: str | None, user: User | None) -> Reply:
        if path is None:
            return _error(ApiError(404, f"fake_github serves only {API_PREFIX}/..."))
        for fault in self._faults:
            if fault.method == method and fault.times > 0 and fault.pattern.search(path):
                fault.times -= 1
                return Reply(fault.reply.status, fault.reply.body, dict(fault.reply.headers))
        if token is not None and user is None:
            return _error(ApiError(401, "Bad credentials"))
        for candidate in ROUTES:
            match = candidate.pattern.match(path)
            if candidate.method != method or match is None:
                continue
            params = {k: urllib.parse.unquote(v) for k, v in match.groupdict().items()}
            call = Call(self.state, Render(self.state, self.base_url, self.root, user), method,
                        path, params, query, {} if body is None else body, user)
            try:
                if "owner" in params:
                    self._authorize(call, candidate.write)
                return candidate.handler(call)
            except ApiError as error:
                return _error(error)
            except Exception as bug:  # the fake's own bug: a 500 here, and in ``errors``
                self.errors.append(f"{method} {path}: {bug!r}")
                return _error(ApiError(500, f"fake_github bug: {bug!r}"))
        return _error(ApiError(404, "Not Found"))

    def _authorize(self, call: Call, write: bool) -> None:
        repo = call.repo  # 404 for a missing repository, before any permission question
        level = LEVELS[self.state.permission(call.user, repo)]
        if level < 1:
            raise ApiError(404, "Not Found")  # GitHub hides what a caller may not read
        if write and call.user is None:
            raise ApiError(401, "Requires authentication")
        if write and level < 2:
            kind = "integration" if call.user and call.user.app else "personal access token"
            raise ApiError(403, f"Resource not accessible by {kind}")

    def _rate_headers(self) -> dict[str, str]:
        remaining = self.state.rate_remaining
        return {"x-ratelimit-limit": str(RATE_LIMIT), "x-ratelimit-remaining": str(remaining),
                "x-ratelimit-reset": str(self.state.rate_reset),
                "x-ratelimit-used": str(RATE_LIMIT - remaining), "x-ratelimit-resource": "core",
                "x-github-request-id": f"FAKE:{len(self.requests):04d}"}


def _encode(files: dict[str, str | bytes] | None) -> dict[str, bytes]:
    return {p: d.encode() if isinstance(d, str) else d for p, d in (files or {}).items()}


def _error(error: ApiError) -> Reply:
    return Reply(error.status, error.body())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as PyGithub's pooled connections expect
    timeout = 10  # an idle kept-alive connection is closed after this

    def _serve(self) -> None:
        fake: FakeGitHub = self.server.fake  # type: ignore[attr-defined]
        raw = self.rfile.read(int(self.headers.get("content-length") or 0)).decode()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        scheme, _, credential = (self.headers.get("authorization") or "").partition(" ")
        token = credential.strip() if scheme.lower() in ("token", "bearer") else ""
        reply = fake.handle(self.command, self.path, body, token or None)
        data = b"" if reply.status == 204 else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            self.send_header("content-type", "application/json; charset=utf-8")
            self.send_header("content-length", str(len(data)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up and closed the connection
            self.close_connection = True

    do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass
