"""GitHub's JSON for each object of the state, as PyGithub parses it."""

from __future__ import annotations

import base64
import hashlib
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .git import Signature, blob_sha
from .state import (
    LEVELS,
    Comment,
    Commit,
    Issue,
    IssueEvent,
    Repo,
    Review,
    ReviewComment,
    State,
    User,
    head_sha,
)


@dataclass
class Render:
    """GitHub's JSON for each object, with absolute URLs under this server's ``/api/v3``."""

    state: State
    api: str
    html: str
    viewer: User | None

    def user(self, login: str) -> dict[str, Any]:
        user = self.state.user(login)
        return {
            "login": login,
            "id": user.id,
            "node_id": f"U_{user.id}",
            "type": "Bot" if user.app else "User",
            "site_admin": False,
            "url": f"{self.api}/users/{login}",
            "html_url": f"{self.html}/{login}",
        }

    def repo(self, repo: Repo) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}"
        level = LEVELS[self.state.permission(self.viewer, repo)]
        body = {
            "id": repo.id,
            "node_id": f"R_{repo.id}",
            "name": repo.name,
            "full_name": repo.full_name,
            "owner": self.user(repo.owner),
            "private": repo.private,
            "fork": repo.parent is not None,
            "default_branch": repo.default_branch,
            "url": url,
            "html_url": f"{self.html}/{repo.full_name}",
            "clone_url": f"{self.html}/{repo.full_name}.git",
            "pulls_url": f"{url}/pulls{{/number}}",
            "issues_url": f"{url}/issues{{/number}}",
            "permissions": {
                "admin": level >= 3,
                "maintain": level >= 3,
                "push": level >= 2,
                "triage": level >= 2,
                "pull": level >= 1,
            },
        }
        if repo.parent:
            parent = self.state.repos[repo.parent]
            body["parent"] = body["source"] = {
                "id": parent.id,
                "full_name": parent.full_name,
                "name": parent.name,
                "owner": self.user(parent.owner),
                "url": f"{self.api}/repos/{parent.full_name}",
                "html_url": f"{self.html}/{parent.full_name}",
                "fork": False,
                "default_branch": parent.default_branch,
            }
        return body

    def label(self, repo: Repo, name: str) -> dict[str, Any]:
        label = repo.labels[name]
        return {
            "id": label.id,
            "node_id": f"LA_{label.id}",
            "name": name,
            "color": label.color,
            "description": label.description,
            "default": False,
            "url": f"{self.api}/repos/{repo.full_name}/labels/{urllib.parse.quote(name)}",
        }

    def association(self, repo: Repo, login: str) -> str:
        if login == repo.owner:
            return "OWNER"
        return "COLLABORATOR" if LEVELS[self.state.user(login).permission] >= 2 else "NONE"

    def issue(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/issues/{issue.number}"
        kind = "pull" if issue.pull else "issues"
        body = {
            "id": issue.id,
            "node_id": f"I_{issue.id}",
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "state": issue.state,
            "state_reason": issue.state_reason,
            "locked": False,
            "url": url,
            "html_url": f"{self.html}/{repo.full_name}/{kind}/{issue.number}",
            "repository_url": f"{self.api}/repos/{repo.full_name}",
            "comments_url": f"{url}/comments",
            "events_url": f"{url}/events",
            "labels_url": f"{url}/labels{{/name}}",
            "user": self.user(issue.author),
            "labels": [self.label(repo, name) for name in issue.labels],
            "assignees": [],
            "assignee": None,
            "milestone": None,
            "comments": sum(c.number == issue.number for c in repo.comments.values()),
            "created_at": issue.created_at,
            "updated_at": issue.updated_at,
            "closed_at": issue.closed_at,
            "author_association": self.association(repo, issue.author),
        }
        if issue.pull:
            pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{issue.number}"
            body["pull_request"] = {
                "url": pull_url,
                "html_url": body["html_url"],
                "diff_url": f"{body['html_url']}.diff",
                "patch_url": f"{body['html_url']}.patch",
                "merged_at": None,
            }
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
            "url": url,
            "issue_url": f"{self.api}/repos/{repo.full_name}/issues/{issue.number}",
            "diff_url": f"{body['html_url']}.diff",
            "patch_url": f"{body['html_url']}.patch",
            "commits_url": f"{url}/commits",
            "review_comments_url": f"{url}/comments",
            "review_comment_url": f"{self.api}/repos/{repo.full_name}/pulls/comments{{/number}}",
            "statuses_url": f"{self.api}/repos/{repo.full_name}/statuses/{head_sha(self.state, issue)}",
            "head": self.part(head, pull.head_ref, head_sha(self.state, issue)),
            "base": self.part(repo, pull.base_ref, repo.resolve(pull.base_ref) or ""),
            "draft": pull.draft,
            "merged": False,
            "merged_at": None,
            "merged_by": None,
            "mergeable": None,
            "maintainer_can_modify": pull.maintainer_can_modify,
            "review_comments": sum(c.number == issue.number for c in repo.review_comments.values()),
            "commits": 1,
            "changed_files": len(files),
            "additions": sum(f["additions"] for f in files),
            "deletions": sum(f["deletions"] for f in files),
        }

    def part(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.user(repo.owner),
            "repo": self.repo(repo),
        }

    def comment(self, repo: Repo, comment: Comment) -> dict[str, Any]:
        issue = repo.issues[comment.number]
        html = self.issue(repo, issue)["html_url"]
        return {
            "id": comment.id,
            "node_id": f"IC_{comment.id}",
            "body": comment.body,
            "url": f"{self.api}/repos/{repo.full_name}/issues/comments/{comment.id}",
            "html_url": f"{html}#issuecomment-{comment.id}",
            "issue_url": f"{self.api}/repos/{repo.full_name}/issues/{comment.number}",
            "user": self.user(comment.author),
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": self.association(repo, comment.author),
        }

    def review(self, repo: Repo, review: Review) -> dict[str, Any]:
        pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{review.number}"
        html = f"{self.html}/{repo.full_name}/pull/{review.number}"
        return {
            "id": review.id,
            "node_id": f"PRR_{review.id}",
            "user": self.user(review.author),
            "body": review.body,
            "state": review.state,
            "commit_id": review.commit_id,
            "submitted_at": review.submitted_at,
            "pull_request_url": pull_url,
            "html_url": f"{html}#pullrequestreview-{review.id}",
            "author_association": self.association(repo, review.author),
        }

    def review_comment(self, repo: Repo, comment: ReviewComment) -> dict[str, Any]:
        pull_url = f"{self.api}/repos/{repo.full_name}/pulls/{comment.number}"
        url = f"{self.api}/repos/{repo.full_name}/pulls/comments/{comment.id}"
        html = f"{self.html}/{repo.full_name}/pull/{comment.number}#discussion_r{comment.id}"
        return {
            "id": comment.id,
            "node_id": f"PRRC_{comment.id}",
            "url": url,
            "html_url": html,
            "pull_request_url": pull_url,
            "pull_request_review_id": comment.review_id,
            "path": comment.path,
            "line": comment.line,
            "original_line": comment.line,
            "side": comment.side,
            "position": None,
            "subject_type": "line",
            "commit_id": comment.commit_id,
            "original_commit_id": comment.commit_id,
            "body": comment.body,
            "user": self.user(comment.author),
            "diff_hunk": "",
            "in_reply_to_id": comment.in_reply_to,
            "created_at": comment.created_at,
            "updated_at": comment.updated_at,
            "author_association": self.association(repo, comment.author),
            "_links": {
                "self": {"href": url},
                "html": {"href": html},
                "pull_request": {"href": pull_url},
            },
        }

    def event(self, repo: Repo, event: IssueEvent) -> dict[str, Any]:
        body = {
            "id": event.id,
            "node_id": f"LE_{event.id}",
            "event": event.event,
            "url": f"{self.api}/repos/{repo.full_name}/issues/events/{event.id}",
            "actor": self.user(event.actor),
            "commit_id": None,
            "commit_url": None,
            "created_at": event.created_at,
            "performed_via_github_app": None,
        }
        if event.label is not None:
            body["label"] = {
                "name": event.label,
                "color": repo.label(event.label, self.state.next_id).color,
            }
        return body

    def commit(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        """A commit of the REST API (``/commits``): the git commit and the users it credits."""
        url = f"{self.api}/repos/{repo.full_name}/commits/{commit.sha}"
        git = self.git_commit(repo, commit)
        committer = (
            self.state.login_for(commit.committer_line.email)
            if commit.git_committer
            else commit.author
        )
        return {
            "sha": commit.sha,
            "node_id": f"C_{commit.sha}",
            "url": url,
            "html_url": git["html_url"],
            "commit": {
                key: git[key]
                for key in ("message", "author", "committer", "url", "tree", "verification")
            },
            "author": self.user(commit.author) if commit.author else None,
            "committer": self.user(committer) if committer else None,
            "parents": [
                {"sha": sha, "url": f"{self.api}/repos/{repo.full_name}/commits/{sha}"}
                for sha in commit.parents
            ],
            "files": [],
        }

    def git_commit(self, repo: Repo, commit: Commit) -> dict[str, Any]:
        """A commit of the Git Data API (``/git/commits``)."""
        api, html = f"{self.api}/repos/{repo.full_name}", f"{self.html}/{repo.full_name}"

        def person(line: Signature) -> dict[str, str]:
            return {"name": line.name, "email": line.email, "date": line.date}

        return {
            "sha": commit.sha,
            "node_id": f"C_{commit.sha}",
            "url": f"{api}/git/commits/{commit.sha}",
            "html_url": f"{html}/commit/{commit.sha}",
            "author": person(commit.author_line),
            "committer": person(commit.committer_line),
            "tree": {"sha": commit.tree, "url": f"{api}/git/trees/{commit.tree}"},
            "message": commit.message,
            "parents": [
                {"sha": sha, "url": f"{api}/git/commits/{sha}", "html_url": f"{html}/commit/{sha}"}
                for sha in commit.parents
            ],
            "verification": {
                "verified": False,
                "reason": "unsigned",
                "signature": None,
                "payload": None,
                "verified_at": None,
            },
        }

    def blob(self, repo: Repo, sha: str) -> dict[str, Any]:
        data = repo.objects.blobs[sha]
        return {
            "sha": sha,
            "node_id": f"B_{sha}",
            "size": len(data),
            "url": f"{self.api}/repos/{repo.full_name}/git/blobs/{sha}",
            "content": base64.encodebytes(data).decode(),
            "encoding": "base64",
        }

    def tree(self, repo: Repo, sha: str, recursive: bool = False) -> dict[str, Any]:
        """A tree's entries; with ``recursive`` those of its subtrees too, under full paths."""
        objects = repo.objects
        entries = (
            objects.walk(sha)
            if recursive
            else ((entry.name, entry) for entry in objects.trees[sha])
        )
        api = f"{self.api}/repos/{repo.full_name}/git"
        listed = []
        for path, entry in entries:
            item: dict[str, Any] = {
                "path": path,
                "mode": entry.mode,
                "type": entry.type,
                "sha": entry.sha,
                "url": f"{api}/{entry.type}s/{entry.sha}",
            }
            if entry.type == "blob":
                item["size"] = len(objects.blobs[entry.sha])
            listed.append(item)
        return {"sha": sha, "url": f"{api}/trees/{sha}", "tree": listed, "truncated": False}

    def ref(self, repo: Repo, ref: str) -> dict[str, Any]:
        sha = repo.refs[ref]
        return {
            "ref": ref,
            "node_id": f"REF_{ref}",
            "url": f"{self.api}/repos/{repo.full_name}/git/{ref}",
            "object": {
                "type": "commit",
                "sha": sha,
                "url": f"{self.api}/repos/{repo.full_name}/git/commits/{sha}",
            },
        }

    def branch(self, repo: Repo, name: str) -> dict[str, Any]:
        commit = repo.commits[repo.refs[f"refs/heads/{name}"]]
        url = f"{self.api}/repos/{repo.full_name}/branches/{name}"
        return {
            "name": name,
            "commit": self.commit(repo, commit),
            "protected": False,
            "_links": {"self": url, "html": f"{self.html}/{repo.full_name}/tree/{name}"},
        }

    def content(self, repo: Repo, path: str, data: bytes, ref: str) -> dict[str, Any]:
        sha = blob_sha(data)
        url = f"{self.api}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        html = f"{self.html}/{repo.full_name}/blob/{ref}/{path}"
        git = f"{self.api}/repos/{repo.full_name}/git/blobs/{sha}"
        encoded = base64.encodebytes(data).decode()  # GitHub wraps the base64 at 60 columns too
        return {
            "type": "file",
            "encoding": "base64",
            "size": len(data),
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "content": encoded,
            "sha": sha,
            "url": url,
            "git_url": git,
            "html_url": html,
            "download_url": f"{self.html}/{repo.full_name}/raw/{ref}/{path}",
            "_links": {"self": url, "git": git, "html": html},
        }

    def entry(self, repo: Repo, path: str, kind: str, ref: str) -> dict[str, Any]:
        url = f"{self.api}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        return {
            "type": kind,
            "name": path.rsplit("/", 1)[-1],
            "path": path,
            "url": url,
            "sha": hashlib.sha1(path.encode()).hexdigest(),
            "size": 0,
            "html_url": f"{self.html}/{repo.full_name}/tree/{ref}/{path}",
        }
