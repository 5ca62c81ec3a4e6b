"""Where the nightly history (``bot.nightly.history``) is kept, read and appended to.

``HistoryStore``: the data branch through PyGithub's Git Data API, so no checkout is needed and
any token with ``contents: write`` does: the night's records are appended to the branch's files
in one new commit, and the branch is moved with a fast-forward-only update. When another run
moved it first (GitHub's 422 "not a fast forward"), the files are read again from the new tip
and the records appended there: two runs at once lose no record. A branch that does not exist
yet is created with the first night's commit.

``GitHistory``: the nightly's measuring job holds no token: it reads the same files with git
from its own checkout (the data branch, or ``origin/`` of it, which a checkout with full history
has). ``LocalStore``: the same files in a local folder.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable
from pathlib import Path

from github import Github, GithubException, InputGitTreeElement
from github.Repository import Repository

from bot.git import git, run_git
from bot.nightly.history import DEFAULT_BRANCH, FOLDER, History, Record, add_file, file_of

ATTEMPTS = 5


class HistoryStore:
    """The data branch of one repository, read and appended to through the GitHub API."""

    def __init__(
        self, repo: Repository, branch: str = DEFAULT_BRANCH, client: Github | None = None
    ) -> None:
        self.repo = repo
        self.branch = branch
        self.client = client  # the client ``repo`` came from (the nightly issue uses it)

    def load(self) -> History:
        tip = self._tip()
        history = History(tip=tip)
        if tip is None:
            return history
        for path, text in self._files(tip).items():
            add_file(history, path, text)
        return history

    def append(
        self, records: Iterable[Record], message: str, plots: dict[str, bytes] | None = None
    ) -> str:
        """Append the records to their files, and put ``plots`` (path: PNG), in one commit on
        the branch; its sha."""
        new = list(records)
        images = [
            InputGitTreeElement(path, "100644", "blob", sha=self._blob(data))
            for path, data in (plots or {}).items()
        ]
        for _ in range(ATTEMPTS):
            tip = self._tip()
            files = self._files(tip) if tip else {}
            lines: dict[str, list[str]] = {}
            for record in new:
                lines.setdefault(file_of(record.benchmark), []).append(record.model_dump_json())
            elements = []
            for path, added in lines.items():
                old = files.get(path, "")
                text = old + ("" if not old or old.endswith("\n") else "\n") + "\n".join(added)
                elements.append(InputGitTreeElement(path, "100644", "blob", content=text + "\n"))
            elements += images
            if tip is None:
                tree = self.repo.create_git_tree(elements)
                commit = self.repo.create_git_commit(message, tree, [])
                try:
                    self.repo.create_git_ref(f"refs/heads/{self.branch}", commit.sha)
                    return commit.sha
                except GithubException as err:
                    if err.status != 422:  # created by another run meanwhile: append to it
                        raise
                    continue
            parent = self.repo.get_git_commit(tip)
            tree = self.repo.create_git_tree(elements, base_tree=parent.tree)
            commit = self.repo.create_git_commit(message, tree, [parent])
            try:
                self.repo.get_git_ref(f"heads/{self.branch}").edit(commit.sha, force=False)
                return commit.sha
            except GithubException as err:
                if err.status != 422:  # moved by another run: read its tip again
                    raise
        raise HistoryConflict(
            f"the data branch {self.branch} kept moving: {ATTEMPTS} attempts to append failed"
        )

    def _blob(self, data: bytes) -> str:
        return self.repo.create_git_blob(base64.b64encode(data).decode(), "base64").sha

    def _tip(self) -> str | None:
        try:
            return self.repo.get_git_ref(f"heads/{self.branch}").object.sha
        except GithubException as err:
            if err.status == 404:
                return None
            raise

    def _files(self, tip: str) -> dict[str, str]:
        tree = self.repo.get_git_tree(tip, recursive=True)
        files = {}
        for entry in tree.tree:
            if (
                entry.type == "blob"
                and entry.path.startswith(f"{FOLDER}/")
                and entry.path.endswith(".jsonl")
            ):
                blob = self.repo.get_git_blob(entry.sha)
                files[entry.path] = _decode(blob.content, blob.encoding)
        return files


class HistoryConflict(Exception):
    """The data branch kept moving under every attempt to append."""


def _decode(content: str, encoding: str) -> str:
    if encoding == "base64":
        return base64.b64decode(content).decode("utf-8", errors="replace")
    return content


class GitHistory:
    """The data branch as a local checkout holds it (``BRANCH``, else ``origin/BRANCH``: what a
    checkout with full history fetched), read with git and never written: the nightly's
    measuring job judges the night with it and needs no GitHub token for it."""

    def __init__(self, repo: Path, branch: str = DEFAULT_BRANCH) -> None:
        self.repo = repo
        self.branch = branch

    def load(self) -> History:
        ref = self._ref()
        history = History()
        if ref is None:  # the first night: no data branch yet
            return history
        history.tip = (
            git(self.repo, ["rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"])
            .decode()
            .strip()
        )
        listed = git(
            self.repo, ["ls-tree", "-r", "-z", "--end-of-options", history.tip, f"{FOLDER}/"]
        )
        for entry in filter(None, listed.split(b"\0")):
            meta, _, raw_path = entry.partition(b"\t")
            mode, kind, sha = meta.decode().split()
            path = raw_path.decode(errors="replace")
            if kind != "blob" or mode not in ("100644", "100755") or not path.endswith(".jsonl"):
                continue
            text = git(self.repo, ["cat-file", "blob", sha]).decode("utf-8", errors="replace")
            add_file(history, path, text)
        return history

    def _ref(self) -> str | None:
        for ref in (f"refs/heads/{self.branch}", f"refs/remotes/origin/{self.branch}"):
            if (
                run_git(
                    self.repo, ["rev-parse", "--verify", "--quiet", "--end-of-options", ref]
                ).returncode
                == 0
            ):
                return ref
        return None


class LocalStore:
    """The same history in a local folder (``history/<benchmark>.jsonl`` under it): for runs
    without GitHub and for ``kernelpilot history`` on a checkout of the data branch."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def load(self) -> History:
        history = History()
        for path in sorted((self.folder / FOLDER).glob("*.jsonl")):
            add_file(
                history, path.relative_to(self.folder).as_posix(), path.read_text(errors="replace")
            )
        return history

    def append(
        self, records: Iterable[Record], message: str = "", plots: dict[str, bytes] | None = None
    ) -> str:
        for path_text, data in (plots or {}).items():
            (self.folder / path_text).parent.mkdir(parents=True, exist_ok=True)
            (self.folder / path_text).write_bytes(data)
        for record in records:
            path = self.folder / file_of(record.benchmark)
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as out:
                out.write(record.model_dump_json() + "\n")
        return str(self.folder)
