"""A stateful fake of the GitHub REST API: a real HTTP server on 127.0.0.1 that PyGithub talks to.

PyGithub is pointed at it the GitHub Enterprise way (``Github(base_url=server.base_url)``, a URL
ending in ``/api/v3``), so its URL building, ``Link``-header pagination, urllib3 retries and error
mapping run as they do against github.com. The state lives in memory: users and their tokens,
repositories (forks share their parent's commits and objects) with commits, branches and file
contents per commit, the Git Data API's blobs, trees and commits under git's own ids (what a bot
writes a multi-file commit with, no checkout needed), issues and pull requests sharing one
numbering, labels and label events, issue comments, reviews and review comments. Answers carry the
fields PyGithub parses (url, html_url, id, number, user.login, head.ref/sha/repo.full_name, ...),
errors GitHub's body (``message``, ``errors``, ``documentation_url``, ``status``), and every answer
the ``x-ratelimit-*`` headers.

What GitHub enforces and a bot can get wrong is enforced here too: a read-only token (GITHUB_TOKEN
on a fork's PR) gets 403 on every write; an installation token (GITHUB_TOKEN, a GitHub App) gets 403
on ``GET /user``; a second open PR for one head and base, an existing ref, a review comment on a
line outside the diff, a non-fast-forward ref update without ``force``, a file update without the
blob's sha, a tree or commit naming an object the repository does not have get GitHub's 422 (409 for
a stale sha; reading a missing object is 404). Tests program faults (``fail_next``) and read every
request (``requests``, ``calls``). Seed with ``add_user``, ``add_repo``, ``fork``, ``add_pull``,
``push``, ``add_comment``, ``add_label``; read the state back with ``repo``, ``issue``, ``comments``
and ``file``; ``client(token)`` is a PyGithub client for it, ``pull_event`` a webhook payload.

Modules: ``errors`` (GitHub's error body), ``state`` (the data and ``State``), ``git`` (blobs,
trees and commit ids as git makes them), ``diff`` (compare patches, lines a review may point at),
``render`` (GitHub's JSON), ``routes/`` (one module per area: ``users``, ``repos`` with refs and
contents, ``issues``, ``pulls``, ``git`` for the Git Data API), ``seed`` (seeding and reading
back), ``server`` (``FakeGitHub``: lifecycle, faults, dispatch, the HTTP handler).
"""

from .errors import ApiError
from .server import API_PREFIX, FakeGitHub, RecordedRequest
from .state import (
    Comment,
    Commit,
    Issue,
    IssueEvent,
    Label,
    PullInfo,
    Repo,
    Review,
    ReviewComment,
    State,
    User,
)

__all__ = [
    "API_PREFIX",
    "ApiError",
    "Comment",
    "Commit",
    "FakeGitHub",
    "Issue",
    "IssueEvent",
    "Label",
    "PullInfo",
    "RecordedRequest",
    "Repo",
    "Review",
    "ReviewComment",
    "State",
    "User",
]
