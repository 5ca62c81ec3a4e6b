"""Issues (pull requests among them), labels, label and state events, issue comments."""

from __future__ import annotations

from ..errors import ApiError, invalid
from ..state import Comment, Issue, IssueEvent, Repo, new_issue, now
from .base import REPO, Call, Reply, paged, route


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
    label.color, label.description = (
        call.body.get("color", label.color),
        call.body.get("description", ""),
    )
    return Reply(201, call.render.label(repo, name))


def issue_filter(call: Call, issue: Issue) -> bool:
    state = call.query.get("state", "open")
    labels = [name for name in call.query.get("labels", "").split(",") if name]
    creator = call.query.get("creator")
    return (
        (state == "all" or issue.state == state)
        and all(n in issue.labels for n in labels)
        and (creator is None or issue.author == creator)
    )


@route("GET", REPO + "/issues")
def list_issues(call: Call) -> Reply:
    """Pull requests are listed too, with a ``pull_request`` key, as GitHub lists them."""
    repo = call.repo
    issues = sorted(
        (i for i in repo.issues.values() if issue_filter(call, i)),
        key=lambda i: i.number,
        reverse=call.query.get("direction", "desc") == "desc",
    )
    return paged(call, [call.render.issue(repo, issue) for issue in issues])


@route("POST", REPO + "/issues", write=True)
def create_issue(call: Call) -> Reply:
    repo = call.repo
    issue = new_issue(
        call.state,
        repo,
        call.field("title"),
        call.body.get("body"),
        call.login(),
        call.body.get("labels", []),
    )
    return Reply(201, call.render.issue(repo, issue))


@route("GET", REPO + r"/issues/(?P<number>\d+)")
def get_issue(call: Call) -> Reply:
    repo = call.repo
    return Reply(200, call.render.issue(repo, repo.issue(call.params["number"])))


def set_labels(call: Call, issue: Issue, names: list[str]) -> None:
    """Replace the labels, recording ``labeled``/``unlabeled`` events as GitHub does."""
    repo = call.repo
    for name in [n for n in issue.labels if n not in names]:
        repo.events.append(
            IssueEvent(call.state.next_id(), issue.number, "unlabeled", call.login(), name, now())
        )
    for name in [n for n in names if n not in issue.labels]:
        repo.label(name, call.state.next_id)
        repo.events.append(
            IssueEvent(call.state.next_id(), issue.number, "labeled", call.login(), name, now())
        )
    issue.labels = list(dict.fromkeys(names))


def set_state(call: Call, issue: Issue, state: str, reason: str | None) -> None:
    if state == issue.state:
        return
    issue.state, issue.state_reason = state, reason or ("completed" if state == "closed" else None)
    issue.closed_at = now() if state == "closed" else None
    call.repo.events.append(
        IssueEvent(
            call.state.next_id(),
            issue.number,
            "closed" if state == "closed" else "reopened",
            call.login(),
            None,
            now(),
        )
    )


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
    return paged(
        call, [call.render.label(repo, n) for n in repo.issue(call.params["number"]).labels]
    )


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
    return paged(
        call, [call.render.comment(repo, c) for c in repo.comments.values() if c.number == number]
    )


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
