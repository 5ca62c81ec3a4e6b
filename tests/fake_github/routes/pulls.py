"""Pull requests, their files, reviews and review comments."""

from __future__ import annotations

from typing import Any

from ..diff import diff_lines
from ..errors import ApiError, invalid
from ..state import Issue, PullInfo, Repo, Review, ReviewComment, State, head_sha, new_issue, now
from .base import REPO, Call, Reply, paged, route
from .issues import edit_issue_fields

REVIEW_STATES = {
    "COMMENT": "COMMENTED",
    "APPROVE": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    None: "PENDING",
}


def pull_filter(call: Call, repo: Repo, issue: Issue) -> bool:
    pull = issue.pull
    if pull is None:
        return False
    state = call.query.get("state", "open")
    owner, _, ref = call.query.get("head", "").rpartition(":")
    head_owner = call.state.repos[pull.head_repo].owner
    return (
        (state == "all" or issue.state == state)
        and (not ref or (pull.head_ref == ref and owner in ("", head_owner)))
        and call.query.get("base", pull.base_ref) == pull.base_ref
    )


@route("GET", REPO + "/pulls")
def list_pulls(call: Call) -> Reply:
    repo = call.repo
    pulls = sorted(
        (i for i in repo.issues.values() if pull_filter(call, repo, i)),
        key=lambda i: i.number,
        reverse=call.query.get("direction", "desc") == "desc",
    )
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
        if (
            issue.state == "open"
            and issue.pull
            and issue.pull.head_repo == head_repo.full_name
            and issue.pull.head_ref == ref
            and issue.pull.base_ref == base
        ):
            raise invalid(
                {
                    "resource": "PullRequest",
                    "code": "custom",
                    "message": f"A pull request already exists for {head_repo.owner}:{ref}.",
                }
            )
    tip = head_repo.refs[f"refs/heads/{ref}"]
    if repo.is_ancestor(tip, repo.refs[f"refs/heads/{base}"]):
        raise invalid(
            {
                "resource": "PullRequest",
                "code": "custom",
                "message": f"No commits between {base} and {head}",
            }
        )
    pull = PullInfo(
        head_repo.full_name,
        ref,
        base,
        tip,
        draft=bool(call.body.get("draft")),
        maintainer_can_modify=bool(call.body.get("maintainer_can_modify")),
    )
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
    return paged(
        call, [call.render.review(repo, r) for r in repo.reviews.values() if r.number == number]
    )


def check_line(call: Call, issue: Issue, comment: dict[str, Any]) -> None:
    """GitHub's 422 for a review comment whose path or line is not in the PR's diff."""
    files = {f["filename"]: f for f in call.state.pull_files(call.repo, issue)}
    if comment.get("path") not in files:
        raise ApiError(422, "Unprocessable Entity", ["Path could not be resolved"])
    sides = diff_lines(files[comment["path"]].get("patch"))
    line = comment.get("line")
    if sides is not None and line not in sides.get(comment.get("side", "RIGHT"), set()):
        raise ApiError(422, "Unprocessable Entity", ["Line could not be resolved"])


def new_review_comment(
    call: Call, issue: Issue, comment: dict[str, Any], review_id: int | None, commit_id: str
) -> ReviewComment:
    stamp = now()
    created = ReviewComment(
        call.state.next_id(),
        issue.number,
        review_id,
        comment["path"],
        comment["line"],
        comment.get("side", "RIGHT"),
        comment["body"],
        commit_id,
        call.login(),
        stamp,
        stamp,
        comment.get("in_reply_to"),
    )
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
    review = Review(
        call.state.next_id(),
        issue.number,
        call.login(),
        call.body.get("body") or "",
        REVIEW_STATES[event],
        commit_id,
        now(),
    )
    repo.reviews[review.id] = review
    for comment in comments:
        new_review_comment(call, issue, comment, review.id, commit_id)
    return Reply(200, call.render.review(repo, review))


@route("GET", REPO + r"/pulls/(?P<number>\d+)/comments")
def list_review_comments(call: Call) -> Reply:
    repo = call.repo
    number = repo.pull(call.params["number"]).number
    return paged(
        call,
        [
            call.render.review_comment(repo, c)
            for c in repo.review_comments.values()
            if c.number == number
        ],
    )


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
