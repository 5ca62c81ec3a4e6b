"""The nightly history: one record per benchmark per night, kept in the repository on a data
branch (``kernelpilot-data`` by default) as ``history/<benchmark>.jsonl``, one JSON object a line.

Written through PyGithub's Git Data API, so no checkout is needed and any token with
``contents: write`` does: the night's records are appended to the branch's files in one new
commit, and the branch is moved with a fast-forward-only update. When another run moved it
first (GitHub's 422 "not a fast forward"), the files are read again from the new tip and the
records appended there: two runs at once lose no record. A branch that does not exist yet is
created with the first night's commit.

The nightly's measuring job holds no token: it reads the same files with git from its own
checkout (``GitHistory``: the data branch, or ``origin/`` of it, which a checkout with full
history has).

A line that does not parse (a hand edit, a merge gone wrong) is reported with its file and
line number and left as it is; the other lines and the night's new records are kept.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from github import Github, GithubException, InputGitTreeElement
from github.Repository import Repository
from pydantic import BaseModel, Field, ValidationError

from bot.git import git, run_git

DEFAULT_BRANCH = "kernelpilot-data"
FOLDER = "history"
PLOTS = "plots"
ATTEMPTS = 5


class Measure(NamedTuple):
    """One timed thing of a night: its median, spread, and the night's re-measurements."""

    median_ms: float | None
    iqr_ms: float
    remeasured_ms: list[float]


class Record(BaseModel):
    """One benchmark's night. Fields added later have defaults: older lines still load."""

    benchmark: str = Field(
        description="'kernel:path_kernelpilot.py' (a shipped kernel), or 'target:path.py:Class' "
        "(a configured target without one: eager and torch.compile only)."
    )
    night: str = Field(description="The date, YYYY-MM-DD (UTC).")
    commit: str
    run_url: str = ""
    device: str
    device_name: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str | None = None
    status: str = Field(description="ok, stale, failed, or a harness status.")
    time_ms: float | None = Field(default=None, description="The kernel's median time.")
    iqr_ms: float = 0.0
    remeasured_ms: list[float] = Field(
        default_factory=list, description="The same night's re-measurements of a suspect kernel."
    )
    eager_ms: float | None = None
    compile_ms: float | None = None
    eager_iqr_ms: float = 0.0
    compile_iqr_ms: float = 0.0
    remeasured_eager_ms: list[float] = Field(
        default_factory=list, description="Re-measurements of a suspect target's eager time."
    )
    remeasured_compile_ms: list[float] = Field(
        default_factory=list, description="Re-measurements of a suspect target's compiled time."
    )
    note: str = ""

    @property
    def has_kernel(self) -> bool:
        """A shipped kernel's night; else a configured target's, timed without a kernel."""
        return self.benchmark.startswith("kernel:")

    def measures(self) -> dict[str, Measure]:
        """What a night is judged and plotted by: the kernel's time, or (a target without a
        kernel) eager's and torch.compile's. The lists are the record's own: appended to."""
        if self.has_kernel:
            return {"kernel": Measure(self.time_ms, self.iqr_ms, self.remeasured_ms)}
        return {
            "eager": Measure(self.eager_ms, self.eager_iqr_ms, self.remeasured_eager_ms),
            "torch.compile": Measure(
                self.compile_ms, self.compile_iqr_ms, self.remeasured_compile_ms
            ),
        }

    @property
    def setup(self) -> str:
        """What must stay the same for two nights to be one series."""
        return f"{self.device_name or self.device}|driver {self.driver}|torch {self.torch}|cuda {self.cuda}"


class Problem(BaseModel):
    """A line of a history file that could not be read."""

    path: str
    line: int
    error: str


class History(BaseModel):
    records: dict[str, list[Record]] = Field(default_factory=dict, description="By benchmark.")
    problems: list[Problem] = Field(default_factory=list)
    tip: str | None = Field(default=None, description="The data branch's commit read.")


def slug(benchmark: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", benchmark).strip("_")


def file_of(benchmark: str) -> str:
    """The history file of a benchmark: its name made safe for a path."""
    return f"{FOLDER}/{slug(benchmark)}.jsonl"


def plot_of(benchmark: str) -> str:
    """Where a benchmark's plot is kept beside its history."""
    return f"{PLOTS}/{slug(benchmark)}.png"


def parse_lines(path: str, text: str) -> tuple[list[Record], list[Problem]]:
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(Record.model_validate_json(line))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            problems.append(Problem(path=path, line=number, error=f"{first['msg']} ({where})"))
    return records, problems


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
            _add(history, path, text)
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
    pass


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
            _add(history, path, text)
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


def _add(history: History, path: str, text: str) -> None:
    records, problems = parse_lines(path, text)
    history.problems += problems
    for record in records:
        history.records.setdefault(record.benchmark, []).append(record)


class LocalStore:
    """The same history in a local folder (``history/<benchmark>.jsonl`` under it): for runs
    without GitHub and for ``kernelpilot history`` on a checkout of the data branch."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def load(self) -> History:
        history = History()
        for path in sorted((self.folder / FOLDER).glob("*.jsonl")):
            _add(
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
