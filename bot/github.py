"""Every write kernelpilot makes to GitHub, through PyGithub: the sticky comment, the review on
the changed classes' lines, the follow-up pull request, the approval label.

The client takes ``base_url`` (GitHub Enterprise: ``https://HOST/api/v3``; Actions gives it as
``GITHUB_API_URL``) and a token: the job's GITHUB_TOKEN, a personal token, or a GitHub App
installation token (from ``actions/create-github-app-token``; it makes the follow-up pull
request's own CI run, which GITHUB_TOKEN's pull requests do not). Rate limits are waited out by
PyGithub's ``GithubRetry`` (PATCH, which it leaves out by default, included: every PATCH here
is an idempotent edit); a 403 that is not a rate limit is a read-only token, raised as
``ReadOnly`` so the caller falls back to the job summary. ``GitHubRepo`` and ``GitHubPull`` are
the interfaces of ``bot.writer`` that the flows write through; only the command line connects.

Re-runs edit, never duplicate: the sticky comment is found by its marker and author, review
comments by a marker per class, the follow-up by its branch ``kernelpilot/pr-<N>``, which is
moved to a new commit only when its files changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import github
from github import Auth, Github, GithubException, GithubRetry, InputGitTreeElement
from github.PullRequest import PullRequest, ReviewComment
from requests.exceptions import RetryError
from urllib3.util.retry import Retry

from bot import markdown as md
from bot.pr.comment import MARKER
from bot.pr.followup import Followup
from bot.pr.trust import PullFacts
from bot.writer import LineNote, ReadOnly, WriteFailed

HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(?P<start>\d+)(?:,(?P<count>\d+))? @@")
REVIEW_MARKER = "<!-- kernelpilot:review {key} -->"


def connect(api_url: str, token: str, secondary_rate_wait: float = 60.0) -> Github:
    """The client for ``api_url`` with ``token``, retrying as above; it makes no request yet.
    Called by the command line only, which hands the flows what they write through."""
    retry = GithubRetry(
        total=5,
        backoff_factor=1.0,
        secondary_rate_wait=secondary_rate_wait,
        max_rate_limit_wait=15 * 60,
        allowed_methods=Retry.DEFAULT_ALLOWED_METHODS | {"GET", "POST", "PATCH"},
        status_forcelist=[502, 503, 504],
    )
    return Github(base_url=api_url.rstrip("/"), auth=Auth.Token(token), retry=retry, timeout=30)


def failure(err: Exception, what: str) -> Exception:
    """A PyGithub or urllib3 error as ReadOnly or WriteFailed, saying what was being done."""
    if isinstance(err, GithubException):
        message = _message(err)
        if err.status == 403 and not github.Requester.Requester.isRateLimitError(str(message)):
            return ReadOnly(f"{what}: GitHub answered 403 ({message}): the token cannot write here")
        return WriteFailed(f"{what}: GitHub answered {err.status} ({message})")
    if isinstance(err, RetryError):
        return WriteFailed(f"{what}: GitHub kept failing after retries ({err})")
    return WriteFailed(f"{what}: {err}")


class GitHubRepo:
    """One repository through PyGithub: ``bot.writer.RepoWriter`` for the flows."""

    def __init__(self, client: Github, repository: str) -> None:
        self.client = client
        self.repository = repository

    def pull(self, number: int) -> GitHubPull:
        return GitHubPull(self.client, self.repository, number)

    def upsert_followup(self, base_branch: str, parent_sha: str, followup: Followup) -> str:
        """Point ``followup.branch`` at a commit on ``parent_sha`` with the files, and open (or
        edit) its pull request into ``base_branch``. The pull request's URL. Both come from
        publish's event and the API (``bot.pr.trust.followup_place``), never from the results."""
        return _upsert_followup(self.client, self.repository, base_branch, parent_sha, followup)


class GitHubPull:
    """One pull request through PyGithub: ``bot.writer.PullWriter`` for the flows."""

    def __init__(self, client: Github, repository: str, number: int) -> None:
        self.client = client
        self.repo = client.get_repo(repository)
        self.pull: PullRequest = self.repo.get_pull(number)
        self._login: str | None | bool = False  # False: not asked yet

    def facts(self) -> PullFacts:
        """The pull request as GitHub reports it now (not as any artifact says)."""
        pull = self.pull
        return PullFacts(
            number=pull.number,
            head_sha=pull.head.sha,
            head_ref=pull.head.ref,
            head_repo=pull.head.repo.full_name if pull.head.repo is not None else None,
            base_ref=pull.base.ref,
            base_repo=pull.base.repo.full_name,
        )

    def file_at(self, path: str, ref: str) -> bytes | None:
        """A file of the base repository at ``ref`` (a commit kernelpilot trusts: the base);
        None where there is none."""
        try:
            content = self.repo.get_contents(path, ref=ref)
        except GithubException as err:
            if err.status == 404:
                return None
            raise failure(err, f"reading {path} at {ref[:12]}") from None
        return content.decoded_content if not isinstance(content, list) else None

    def _ours(self, user, body: str, marker: str) -> bool:
        if not (body or "").startswith(marker):
            return False
        if self._login is False:
            self._login = own_login(self.client)
        return written_by(user, self._login)  # type: ignore[arg-type]

    def upsert_comment(self, body: str, create: bool = True) -> str | None:
        """Edit the sticky comment, or create it (unless ``create`` is False); its URL."""
        body = md.capped(body)
        try:
            for comment in self.pull.get_issue_comments():
                if self._ours(comment.user, comment.body, MARKER):
                    if comment.body != body:
                        comment.edit(body)
                    return comment.html_url
            return self.pull.create_issue_comment(body).html_url if create else None
        except (GithubException, RetryError) as err:
            raise failure(err, "writing the pull request comment") from None

    def diff_lines(self) -> dict[str, set[int]]:
        """Head-side lines each file's diff shows (added and context): where a review comment
        may go. A file without a patch (binary, too large) has none."""
        lines: dict[str, set[int]] = {}
        for changed in self.pull.get_files():
            lines[changed.filename] = _patch_lines(changed.patch)
        return lines

    def upsert_review(self, notes: Iterable[LineNote], commit_sha: str) -> list[str]:
        """Edit each class's earlier review comment, post the new ones in one COMMENT review;
        notes on lines outside the diff are skipped. What was skipped, for the log."""
        skipped: list[str] = []
        try:
            visible = self.diff_lines()
            existing = {}
            for comment in self.pull.get_review_comments():
                key = _review_key(comment.body)
                if key and self._ours(comment.user, comment.body, REVIEW_MARKER.format(key=key)):
                    existing[key] = comment
            new: list[ReviewComment] = []
            for note in notes:
                body = md.capped(REVIEW_MARKER.format(key=note.key) + "\n" + note.body)
                if note.key in existing:
                    if existing[note.key].body != body:
                        existing[note.key].edit(body)
                elif note.line in visible.get(note.path, set()):
                    new.append(
                        {"path": note.path, "line": note.line, "side": "RIGHT", "body": body}
                    )
                else:
                    skipped.append(f"{note.path}:{note.line} is not in the diff")
            if new:
                try:
                    self.pull.create_review(
                        commit=self.repo.get_commit(commit_sha),
                        body="kernelpilot found faster kernels for these classes "
                        "(details in the kernelpilot comment).",
                        event="COMMENT",
                        comments=new,
                    )
                except GithubException as err:
                    if err.status != 422:  # the diff moved on meanwhile: no review this time
                        raise
                    skipped.append(f"GitHub refused the review: {_message(err)}")
        except (GithubException, RetryError) as err:
            raise failure(err, "writing the review comments") from None
        return skipped

    def permission(self, login: str) -> str | None:
        """``login``'s role on the repository (admin, maintain, write, triage, read, none)."""
        try:
            return self.repo.get_collaborator_permission(login)
        except GithubException:
            return None

    def remove_label(self, name: str) -> None:
        try:
            self.pull.as_issue().remove_from_labels(name)
        except GithubException as err:
            if err.status != 404:  # already gone
                raise failure(err, f"removing the label {name!r}") from None


def own_login(client: Github) -> str | None:
    """The token's user; None for an installation token (GITHUB_TOKEN, an App), which may not
    read ``/user``: what it wrote is then known by kernelpilot's marker on a Bot's text."""
    try:
        return client.get_user().login
    except GithubException as err:
        if err.status not in (401, 403):
            raise
        return None


def written_by(user, login: str | None) -> bool:
    """Whether ``user`` is the token's user (``own_login``), or a Bot when that is unknown."""
    return user.login == login if login else user.type == "Bot"


def _upsert_followup(
    client: Github, repository: str, base_branch: str, parent_sha: str, followup: Followup
) -> str:
    """``GitHubRepo.upsert_followup``: the branch moved only when its files changed, the pull
    request edited only when its title, body or base did."""
    try:
        repo = client.get_repo(repository)
        parent = repo.get_git_commit(parent_sha)
        elements = [
            InputGitTreeElement(file.path, "100644", "blob", content=file.content)
            for file in followup.files
        ]
        tree = repo.create_git_tree(elements, base_tree=parent.tree)
        ref_name = f"heads/{followup.branch}"
        try:
            ref = repo.get_git_ref(ref_name)
        except GithubException as err:
            if err.status != 404:
                raise
            ref = None
        if ref is None or repo.get_git_commit(ref.object.sha).tree.sha != tree.sha:
            commit = repo.create_git_commit(followup.title, tree, [parent])
            if ref is None:
                repo.create_git_ref(f"refs/{ref_name}", commit.sha)
            else:  # kernelpilot's own branch, rebuilt on the new head each run
                ref.edit(commit.sha, force=True)
        owner = repository.split("/")[0]
        for pull in repo.get_pulls(state="open", head=f"{owner}:{followup.branch}"):
            if (
                pull.title != followup.title
                or pull.body != followup.body
                or pull.base.ref != base_branch
            ):
                pull.edit(title=followup.title, body=followup.body, base=base_branch)
            return pull.html_url
        try:
            pull = repo.create_pull(
                base=base_branch, head=followup.branch, title=followup.title, body=followup.body
            )
        except GithubException as err:  # 422: another run opened it meanwhile
            if err.status != 422:
                raise
            opened = list(repo.get_pulls(state="open", head=f"{owner}:{followup.branch}"))
            if not opened:
                raise
            pull = opened[0]
        return pull.html_url
    except (GithubException, RetryError) as err:
        raise failure(err, f"writing the follow-up pull request ({followup.branch})") from None


def _message(err: GithubException) -> str:
    data = err.data
    message = data.get("message") if isinstance(data, dict) else data
    errors = data.get("errors") if isinstance(data, dict) else None
    return f"{message} {errors}" if errors else str(message)


def _patch_lines(patch: str | None) -> set[int]:
    lines: set[int] = set()
    if not patch:
        return lines
    number = 0
    for text in patch.splitlines():
        hunk = HUNK.match(text)
        if hunk:
            number = int(hunk["start"])
            continue
        if text.startswith("-") or text.startswith("\\"):
            continue
        lines.add(number)
        number += 1
    return lines


def _review_key(body: str | None) -> str | None:
    match = re.match(r"<!-- kernelpilot:review (?P<key>\S+) -->", body or "")
    return match["key"] if match else None
