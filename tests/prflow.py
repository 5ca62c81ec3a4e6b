"""A pull request's world for the PR-flow tests (on cpu and on cuda: tests/test_gpu_flows.py): a real
git checkout with a changed module, the same commits seeded on the fake GitHub server, and the
workflow's jobs run as the action runs them (the CLI in a subprocess, GitHub Actions'
environment, an event file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fake_github import FakeGitHub
from tests.gitrepo import commit, git, init

ROOT = Path(__file__).resolve().parent.parent
REPO = "acme/models"
NUMBER = 7
BOT = "github-actions[bot]"
JOB_LIMIT_S = 1800  # a step, on a loaded 2-core machine; a GitHub job may run for hours
MODULE = """\
import torch
from torch import nn


class Activation(nn.Module):
    \"\"\"A pointwise chain: eager passes over memory once per op, a fused kernel once.\"\"\"

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))
        self.shift = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        y = x * self.scale + self.shift
        return torch.tanh(y) * torch.sigmoid(y) + 0.5 * y


def make_inputs():
    return [torch.randn(32, 64, 1024)]
"""
CHANGED = MODULE.replace("+ 0.5 * y\n", "+ 0.5 * y * y - torch.relu(-y)\n").replace(
    "once per op", "once per op (seven ops)"
)  # the docstring too: the class line is then in the diff, where a review comment may go
PROJECT = """\
[tool.kernelpilot]
device = "cpu"
[tool.kernelpilot.eval]
compile_baseline = false
time_budget_s = 0.5
review_speedup = 1000  # the fused chain runs 6-13x faster here: no review flag in these tests
[[tool.kernelpilot.targets]]
module = "models/act.py:Activation"
init_args = [1024]
inputs = "models/act.py:make_inputs"
"""
CLASS_LINE = MODULE.splitlines().index("class Activation(nn.Module):") + 1


class Project:
    """The local checkout: main (base) and feature (head) with a changed module."""

    def __init__(self, root: Path, project: str = PROJECT, module: str = MODULE,
                 changed: str = CHANGED) -> None:  # fmt: skip
        self.root = init(root)
        self.base_files = {"pyproject.toml": project, "models/act.py": module,
                           "tests/__init__.py": ""}  # fmt: skip
        self.base = commit(root, self.base_files, "base")
        git(root, "checkout", "--quiet", "-b", "feature")
        self.head_files = {"models/act.py": changed}
        self.head = commit(root, self.head_files, "faster activation")

    def seed(self, fake: FakeGitHub, fork: bool = False, labels: tuple[str, ...] = ()) -> None:
        """The same commits on the fake server, and pull request 7 from feature into main."""
        fake.add_user("maintainer-token", "maintainer", "write")
        fake.add_user("reader-token", "reader", "read")
        fake.add_user("gh-token", BOT, "write")
        fake.add_user("ro-token", "read-only[bot]", "read")
        fake.add_repo(REPO)
        fake.push(REPO, "main", self.base_files, "base", sha=self.base)
        fake.add_pull(REPO, NUMBER, head_ref="feature", head_sha=self.head, fork=fork,
                      head_files=self.head_files, labels=labels, author="contributor")  # fmt: skip


class Job:
    """One job of the workflow: the CLI with GitHub Actions' environment."""

    def __init__(self, tmp: Path, fake: FakeGitHub, event: dict, name: str = "pull_request_target",
                 token: str | None = "gh-token") -> None:  # fmt: skip
        self.tmp = tmp
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "event.json").write_text(json.dumps(event))
        self.output = tmp / "output.txt"
        self.summary = tmp / "summary.md"
        self.env = {
            key: value
            for key, value in os.environ.items()
            # KERNELPILOT_BWRAP says where this machine's bubblewrap is, as PATH does
            if not key.startswith(("GITHUB_", "OPENAI_", "KERNELPILOT_"))
            or key == "KERNELPILOT_BWRAP"
        }
        self.env.update({
            "GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(tmp / "event.json"),
            "GITHUB_REPOSITORY": REPO, "GITHUB_API_URL": fake.base_url, "GITHUB_RUN_ID": "42",
            "GITHUB_SERVER_URL": fake.root, "GITHUB_OUTPUT": str(self.output),
            "GITHUB_STEP_SUMMARY": str(self.summary), "GITHUB_ACTIONS": "true",
            # The jobs run this tree's kernelpilot, not whichever one is installed.
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        })  # fmt: skip
        if token:
            self.env["GITHUB_TOKEN"] = token

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        """``kernelpilot github ARGS`` as the job's step; past ``JOB_LIMIT_S`` it is cancelled
        as a runner cancels a step (SIGTERM: it stops its workers and says so), and its output
        says how long it ran."""
        command = [sys.executable, "-c", "from bot.cli import main; main()", "github", *args]
        process = subprocess.Popen(
            command, cwd=cwd or self.tmp, env={**self.env, **env}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=JOB_LIMIT_S)
        except subprocess.TimeoutExpired:
            process.terminate()
            stdout, stderr = process.communicate()
            stderr += f"\n[the step ran past {JOB_LIMIT_S} s and was cancelled (SIGTERM)]\n"
        return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)

    def outputs(self) -> dict[str, str]:
        """GITHUB_OUTPUT's name<<DELIMITER blocks."""
        values: dict[str, str] = {}
        lines = self.output.read_text().splitlines() if self.output.exists() else []
        index = 0
        while index < len(lines):
            name, _, delimiter = lines[index].partition("<<")
            end = lines.index(delimiter, index + 1)
            values[name] = "\n".join(lines[index + 1 : end])
            index = end + 1
        return values
