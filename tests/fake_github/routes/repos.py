"""A repository, its collaborators' permission, branches, commits, git refs and contents."""

from __future__ import annotations

import base64

from ..errors import ApiError
from ..git import blob_sha
from ..state import Commit, Repo
from .base import REPO, Call, Reply, paged, route


@route("GET", REPO)
def get_repo(call: Call) -> Reply:
    return Reply(200, call.render.repo(call.repo))


@route("GET", REPO + r"/collaborators/(?P<login>[^/]+)/permission")
def get_permission(call: Call) -> Reply:
    login = call.params["login"]
    permission = call.state.permission(call.state.user(login), call.repo)
    return Reply(
        200, {"permission": permission, "role_name": permission, "user": call.render.user(login)}
    )


@route("GET", REPO + "/branches")
def list_branches(call: Call) -> Reply:
    repo = call.repo
    names = sorted(
        ref.removeprefix("refs/heads/") for ref in repo.refs if ref.startswith("refs/heads/")
    )
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
    children = {
        p[len(prefix) :].split("/")[0]: "/" in p[len(prefix) :]
        for p in tree
        if p.startswith(prefix)
    }
    if not children:
        raise ApiError(404, "Not Found")
    return Reply(
        200,
        [
            call.render.entry(repo, prefix + name, "dir" if is_dir else "file", ref)
            for name, is_dir in sorted(children.items())
        ],
    )


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
    files = {p: d for p, d in tree.items() if p != path} | (
        {path: data} if data is not None else {}
    )
    commit = call.state.commit(repo, repo.refs[ref], files, call.field("message"), call.login())
    repo.refs[ref] = commit.sha
    return repo, commit, path in tree


@route("PUT", REPO + r"/contents/(?P<path>.+)", write=True)
def put_contents(call: Call) -> Reply:
    path = call.params["path"].strip("/")
    data = base64.b64decode(call.field("content"))
    repo, commit, existed = commit_file(call, path, data)
    return Reply(
        200 if existed else 201,
        {
            "content": call.render.content(repo, path, data, commit.sha),
            "commit": call.render.commit(repo, commit),
        },
    )


@route("DELETE", REPO + r"/contents/(?P<path>.+)", write=True)
def delete_contents(call: Call) -> Reply:
    repo, commit, _ = commit_file(call, call.params["path"].strip("/"), None)
    return Reply(200, {"content": None, "commit": call.render.commit(repo, commit)})
