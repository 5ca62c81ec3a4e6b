"""A pull request's module that attacks kernelpilot when it is imported, through every command.

Its import (the module file's top level, which every worker that loads it runs):
- writes a marker file to a folder of the machine (``KP_HOSTILE_MARKER``): it lands only if
  the module ran outside a sandbox, kernelpilot's own process included;
- looks for the LLM key and the GitHub token in its environment and in every ``/proc/*/environ``
  it can read, and prints what it found (the worker's log, which reports and comments quote)
  and puts it into the module's docstring-like constant that errors would show.

Each command must run the module (its outputs are needed: the command gets as far as the
reference), leave no marker, and show the secrets nowhere: not on its terminal, not in a file
it wrote.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gitrepo import commit, git, init

SECRET_KEY = "sk-hostile-test-0123456789abcdef"
SECRET_TOKEN = "ghs_hostiletesttoken0123456789"
HOSTILE = '''\
"""A module whose import attacks the process that imports it."""

import os
import pathlib

import torch
import torch.nn as nn

FOUND = []
for name in ("OPENAI_API_KEY", "GITHUB_TOKEN"):
    if os.environ.get(name):
        FOUND.append(os.environ[name])
for entry in pathlib.Path("/proc").iterdir():
    try:
        FOUND.append((entry / "environ").read_bytes().decode(errors="replace"))
    except OSError:
        pass
print("HOSTILE found:", FOUND)
try:
    marker = pathlib.Path(os.environ["KP_HOSTILE_MARKER"]) / f"ran-in-{os.getpid()}"
    marker.write_text("\\n".join(FOUND))
except (KeyError, OSError):
    pass


class Model(nn.Module):
    """Nothing to fuse: the offline proposer has no candidate, so no kernel is built."""

    def __init__(self, size=64):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size, size))

    def forward(self, x):
        return x @ self.weight


def get_inputs():
    return [torch.randn(32, 64)]


def get_init_inputs():
    return [64]
'''
PROJECT = """\
[tool.kernelpilot]
device = "cpu"
[tool.kernelpilot.eval]
compile_baseline = false
time_budget_s = 0.2
[[tool.kernelpilot.targets]]
module = "models/hostile.py:Model"
init_args = [64]
inputs = "models/hostile.py:get_inputs"
"""
# A candidate that passes the static gate and fails to compile at once: the evaluation gets
# past the reference (the module's import) and builds nothing that would take minutes.
CANDIDATE = """\
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

_ext = load_inline(name="nope", cpp_sources="#error no kernel here\\n", functions=["f"])


class ModelNew(nn.Module):
    def __init__(self, size=64):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(size, size))

    def forward(self, x):
        return _ext.f(x, self.weight)
"""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    (root / "repo").mkdir()
    repo = init(root / "repo")
    # The pull request changes the forward (a change of its docstring alone is cosmetic: it
    # would not be run at all).
    base = commit(repo, {"pyproject.toml": PROJECT, "models/hostile.py": HOSTILE.replace(
        "return x @ self.weight", "return x @ self.weight.t()")}, "base")  # fmt: skip
    git(repo, "checkout", "--quiet", "-b", "feature")
    head = commit(repo, {"models/hostile.py": HOSTILE}, "the hostile change")
    (root / "marker").mkdir()
    (root / "candidate.py").write_text(CANDIDATE)
    event = {
        "pull_request": {
            "number": 9, "head": {"sha": head, "ref": "feature", "repo": {"full_name": "o/r"}},
            "base": {"sha": base, "ref": "main", "repo": {"full_name": "o/r"}},
            "user": {"login": "attacker"}, "labels": [],
        },
        "repository": {"full_name": "o/r"}, "sender": {"login": "attacker"},
    }  # fmt: skip
    (root / "event.json").write_text(json.dumps(event))
    return {"root": root, "repo": repo, "marker": root / "marker"}


def _run(world: dict[str, Path], *args: str, **extra_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "KERNELPILOT_"))}
    env.update({"OPENAI_API_KEY": SECRET_KEY, "GITHUB_TOKEN": SECRET_TOKEN,
                "KP_HOSTILE_MARKER": str(world["marker"]), "KERNELPILOT_LLM": "offline",
                **extra_env})  # fmt: skip
    return subprocess.run(
        [sys.executable, "-c", "from bot.cli import main; main()", *args],
        cwd=world["repo"], env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


def _written(folder: Path) -> str:
    return "\n".join(
        path.read_text(errors="replace") for path in folder.rglob("*") if path.is_file()
    )


COMMANDS = {
    "optimize": lambda w: ["optimize", str(w["repo"] / "models/hostile.py"), "--device", "cpu",
                           "--llm", "offline",
                           "--out", str(w["root"] / "out-optimize"), "--no-compile-baseline"],
    "evaluate": lambda w: ["evaluate", str(w["repo"] / "models/hostile.py"),
                           str(w["root"] / "candidate.py"), "--device", "cpu",
                           "--out", str(w["root"] / "out-evaluate"), "--no-compile-baseline"],
    "audit": lambda w: ["audit", str(w["repo"] / "models/hostile.py"), "--device", "cpu"],
    "review": lambda w: ["review", "--base", "main", "--device", "cpu",
                         "--out", str(w["root"] / "out-review")],
    "nightly": lambda w: ["nightly", "--device", "cpu", "--history-dir", str(w["root"] / "hist"),
                          "--out", str(w["root"] / "out-nightly")],
}  # fmt: skip


# What each command says that it could only say after running the module.
EVIDENCE = {
    "optimize": "nothing to fuse",
    "evaluate": "did not compile",
    "audit": "spec is strong",
    "review": "nothing to fuse",
    "nightly": "eager",
    "github measure": "1 module(s) measured",
}


@pytest.mark.parametrize("command", [*COMMANDS, "github measure"])
def test_a_hostile_module_runs_only_in_the_sandbox_and_reaches_no_secret(world, command):
    if command == "github measure":
        done = _run(
            world, "github", "measure", "--device", "cpu", "--repo", str(world["repo"]),
            "--out", str(world["root"] / "out-measure"),
            GITHUB_EVENT_NAME="pull_request", GITHUB_EVENT_PATH=str(world["root"] / "event.json"),
            GITHUB_REPOSITORY="o/r",
        )  # fmt: skip
    else:
        done = _run(world, *COMMANDS[command](world))
    shown = done.stdout + done.stderr
    assert "Traceback" not in shown, shown[-3000:]
    # The module ran: every command got as far as a result that needs the module's outputs.
    assert EVIDENCE[command] in shown, shown[-3000:]
    assert not list(world["marker"].iterdir()), "the module's import ran outside a sandbox"
    written = _written(world["root"])
    for secret in (SECRET_KEY, SECRET_TOKEN):
        assert secret not in shown, f"{command} showed a secret"
        assert secret not in written, f"{command} wrote a secret into a file"
