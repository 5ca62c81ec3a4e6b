"""The Git Data API: blobs, trees and commits, what a bot writes a multi-file commit with.

A repository and its forks share these objects, as they share commits. A commit made here is a
commit like any other: a ref may point at it (``POST``/``PATCH git/refs``), contents are read at
it, a pull request's head may be it. The 422 messages are GitHub's.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from ..errors import ApiError, invalid
from ..git import BLOB_MODES, FILE_MODE, SUBMODULE_MODE, TREE_MODE, Signature, commit_sha, utc_date
from ..state import Commit, Repo, noreply_email, now
from .base import REPO, Call, Reply, route

ENTRY_MODES = (*BLOB_MODES, TREE_MODE, SUBMODULE_MODE)
SHA_OR_CONTENT = (
    "Must supply either tree.sha or tree.content. Request will be rejected if both are present."
)


@route("POST", REPO + "/git/blobs", write=True)
def create_blob(call: Call) -> Reply:
    repo, content = call.repo, call.field("content")
    encoding = call.body.get("encoding", "utf-8")
    if not isinstance(content, str):
        raise invalid({"resource": "Blob", "field": "content", "code": "invalid"})
    if encoding in ("utf-8", "utf8"):
        data = content.encode()
    elif encoding == "base64":
        try:
            data = base64.b64decode("".join(content.split()), validate=True)  # lines may wrap
        except binascii.Error:
            raise invalid({"resource": "Blob", "field": "content", "code": "invalid"}) from None
    else:
        raise invalid({"resource": "Blob", "field": "encoding", "code": "invalid"})
    sha = repo.objects.write_blob(data)
    url = f"{call.render.api}/repos/{repo.full_name}/git/blobs/{sha}"
    return Reply(201, {"sha": sha, "url": url})


@route("GET", REPO + r"/git/blobs/(?P<sha>[^/]+)")
def get_blob(call: Call) -> Reply:
    repo, sha = call.repo, call.params["sha"]
    if sha not in repo.objects.blobs:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.blob(repo, sha))


@route("POST", REPO + "/git/trees", write=True)
def create_tree(call: Call) -> Reply:
    """A tree of ``base_tree`` (or nothing) changed by the items of ``tree``: each writes a path
    (``sha`` of a blob or tree, or ``content``) or, with ``"sha": null``, deletes it."""
    repo, items = call.repo, call.field("tree")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise invalid({"resource": "Tree", "field": "tree", "code": "invalid"})
    files: dict[str, bytes] = {}
    modes: dict[str, str] = {}
    base = call.body.get("base_tree")
    if base is not None:
        if not isinstance(base, str) or base not in repo.objects.trees:
            raise ApiError(422, "base_tree is not a valid tree oid")
        files, modes = repo.objects.read_tree(base)
    for item in items:
        apply_item(repo, files, modes, item)
    return Reply(201, call.render.tree(repo, repo.objects.write_tree(files, modes)))


def apply_item(
    repo: Repo, files: dict[str, bytes], modes: dict[str, str], item: dict[str, Any]
) -> None:
    """One item of a create-tree request applied to the flat tree ``files`` (and ``modes``)."""
    path, mode = checked_path(item.get("path")), item.get("mode")
    content, sha = item.get("content"), item.get("sha")
    if mode not in ENTRY_MODES:
        raise ApiError(422, "Must supply a valid tree.mode")
    if ("sha" in item) == (content is not None):
        raise ApiError(422, SHA_OR_CONTENT)
    if mode == SUBMODULE_MODE or item.get("type") == "commit":
        raise NotImplementedError("fake_github keeps no submodules (mode 160000, type commit)")
    kind = item.get("type") or ("tree" if mode == TREE_MODE else "blob")
    if content is not None:
        if mode == TREE_MODE:
            raise ApiError(422, "A subdirectory may not have content")
        if not isinstance(content, str):
            raise invalid({"resource": "Tree", "field": "content", "code": "invalid"})
        data: bytes | None = content.encode()
    elif sha is None:
        data = None  # deletes the path, a file or a folder
    elif kind == "tree":
        if sha not in repo.objects.trees:
            raise ApiError(422, f"tree.sha {sha} is not a valid tree")
        if mode != TREE_MODE:
            raise ApiError(422, "GitRPC::BadObjectState")
        remove(files, modes, path)
        inner_files, inner_modes = repo.objects.read_tree(sha)
        files.update({f"{path}/{p}": d for p, d in inner_files.items()})
        modes.update({f"{path}/{p}": m for p, m in inner_modes.items()})
        return
    else:
        if sha not in repo.objects.blobs:
            raise ApiError(422, f"tree.sha {sha} is not a valid blob")
        if mode == TREE_MODE:
            raise ApiError(422, "GitRPC::BadObjectState")
        data = repo.objects.blobs[sha]
    remove(files, modes, path)
    if data is not None:
        files[path] = data
        if mode != FILE_MODE:
            modes[path] = mode


def checked_path(path: Any) -> str:
    if not isinstance(path, str) or not path:
        raise invalid({"resource": "Tree", "field": "path", "code": "missing_field"})
    if path.startswith("/"):
        raise ApiError(422, "tree.path cannot start with a slash")
    if path.endswith("/"):
        raise ApiError(422, "tree.path cannot end with a slash")
    if any(part in ("", ".", "..") or part.lower() == ".git" for part in path.split("/")):
        raise ApiError(422, "tree.path contains a malformed path component")
    return path


def remove(files: dict[str, bytes], modes: dict[str, str], path: str) -> None:
    """Drop what is at ``path`` (a file or a folder) and a file where a folder of it must go."""
    parts = path.split("/")
    folders = {"/".join(parts[:end]) for end in range(1, len(parts))}
    for gone in [p for p in files if p == path or p.startswith(f"{path}/") or p in folders]:
        del files[gone]
        modes.pop(gone, None)


@route("GET", REPO + r"/git/trees/(?P<sha>.+)")
def get_tree(call: Call) -> Reply:
    """A tree by its sha, or the tree of a branch, tag or commit; ``recursive`` (any value)
    lists the subtrees' entries too."""
    repo, name = call.repo, call.params["sha"]
    sha = name if name in repo.objects.trees else None
    if sha is None and (commit := repo.resolve(name)) is not None:
        sha = repo.commits[commit].tree
    if sha is None:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.tree(repo, sha, recursive="recursive" in call.query))


@route("POST", REPO + "/git/commits", write=True)
def create_commit(call: Call) -> Reply:
    """A commit of ``tree`` on ``parents``; author and committer default to the token's user
    and now (the committer to the author). It is on no branch until a ref points at it."""
    repo, message, tree = call.repo, call.field("message"), call.field("tree")
    parents = call.body.get("parents", [])
    if not isinstance(message, str):
        raise invalid({"resource": "Commit", "field": "message", "code": "invalid"})
    if not isinstance(tree, str) or tree not in repo.objects.trees:
        known = isinstance(tree, str) and (tree in repo.objects.blobs or tree in repo.commits)
        raise ApiError(422, "Tree SHA is not a tree object" if known else "Tree SHA does not exist")
    if not isinstance(parents, list) or not all(
        isinstance(p, str) and p in repo.commits for p in parents
    ):
        raise ApiError(422, "Parent SHA does not exist or is not a commit object")
    user = call.login()
    author = signature(call, "author", Signature(user, noreply_email(user), now()))
    committer = signature(call, "committer", author)
    sha = commit_sha(tree, parents, author, committer, message)
    if sha not in repo.commits:  # the same fields make the same commit, as in git
        files, modes = repo.objects.read_tree(tree)
        repo.commits[sha] = Commit(
            sha,
            message,
            list(parents),
            files,
            call.state.login_for(author.email),
            author.date,
            tree,
            modes,
            author,
            committer,
        )
    return Reply(201, call.render.git_commit(repo, repo.commits[sha]))


def signature(call: Call, role: str, default: Signature) -> Signature:
    given = call.body.get(role)
    if given is None:
        return default
    if not isinstance(given, dict):
        raise invalid({"resource": "Commit", "field": role, "code": "invalid"})
    for key in ("name", "email"):
        if not isinstance(given.get(key), str) or not given[key]:
            raise ApiError(422, f'Invalid request.\n\n"{key}" wasn\'t supplied.')
    try:
        date = utc_date(given["date"]) if given.get("date") is not None else now()
    except (TypeError, ValueError):
        raise invalid({"resource": "Commit", "field": f"{role}.date", "code": "invalid"}) from None
    return Signature(given["name"], given["email"], date)


@route("GET", REPO + r"/git/commits/(?P<sha>[^/]+)")
def get_git_commit(call: Call) -> Reply:
    repo, sha = call.repo, call.params["sha"]
    if sha not in repo.commits:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.git_commit(repo, repo.commits[sha]))
