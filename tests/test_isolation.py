"""A crashing, a hanging and a wrong candidate each end as their own status; the run goes on.

And a worker that ``run_worker`` really spawned has no secrets in its environment, a network
namespace of its own where the OS allows one, and an address-space limit: read from /proc.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.evaluate import Evaluator
from harness.problem import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox import CLONE_NEWNET, CLONE_NEWUSER, clean_environment, run_worker
from tests.conftest import FIXTURES, fast_config


def _candidate(name: str) -> Candidate:
    return Candidate(source=(FIXTURES / f"isolation_{name}.py").read_text())


def test_failures_are_contained_and_the_run_goes_on():
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    evaluator = Evaluator(fast_config(run_timeout_s=25), seed=7)
    candidates = {name: _candidate(name) for name in ["crash", "spin", "wrong", "honest"]}
    evaluator.prebuild(problem, list(candidates.values()))
    results = {name: evaluator.evaluate(problem, c) for name, c in candidates.items()}

    assert results["crash"].status is Status.runtime_error
    assert "SIGSEGV" in results["crash"].reason
    assert results["spin"].status is Status.timeout
    assert results["wrong"].status is Status.incorrect
    failed = [check.name for check in results["wrong"].checks if not check.passed]
    assert "correct_outputs" in failed
    honest = results["honest"]
    assert honest.status is Status.ok, honest.reason + honest.log
    assert honest.eager and honest.candidate and honest.vs_eager is not None
    assert all(check.passed for check in honest.checks if check.name != "network_isolated")


def test_worker_environment_has_no_secrets(monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", "hunter2")
    monkeypatch.setenv("HARMLESS", "yes")
    env = clean_environment()
    assert "GITHUB_TOKEN" not in env and "OPENAI_API_KEY" not in env
    assert "MY_SERVICE_PASSWORD" not in env
    assert env["HARMLESS"] == "yes"


# --- what a worker run_worker really spawned carries (not what its helpers say) ---------------
MEMORY_LIMIT_GB = 8
SECRETS = {"GITHUB_TOKEN": "ghs_secret", "OPENAI_API_KEY": "sk-secret", "DB_PASSWORD": "hunter2"}


@dataclass(frozen=True)
class Spawned:
    """What the kernel says about a worker process right after it was started."""

    environ: dict[str, str]
    net_namespace: str
    limits: str


def _observe(pid: int) -> Spawned:
    proc = Path(f"/proc/{pid}")
    raw = (proc / "environ").read_bytes()
    environ = dict(entry.split("=", 1) for entry in raw.decode().split("\0") if "=" in entry)
    return Spawned(environ, os.readlink(proc / "ns" / "net"), (proc / "limits").read_text())


@pytest.fixture(scope="module")
def spawned(tmp_path_factory: pytest.TempPathFactory) -> Spawned:
    """One real worker, started by run_worker with secrets in our environment.

    Popen returns once the child has exec'd (it waits for exec to succeed), so the spawned
    ``python -m harness.worker`` is read from /proc right then, while it is still importing
    torch; with no job.json it then exits: one cheap worker start for every test below.
    """
    seen: list[Spawned] = []
    real_popen = subprocess.Popen

    def spawn(*args, **kwargs) -> subprocess.Popen:
        process = real_popen(*args, **kwargs)
        seen.append(_observe(process.pid))
        return process

    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**SECRETS, "HARMLESS": "yes"}.items():
            patch.setenv(name, value)
        patch.setattr(subprocess, "Popen", spawn)
        outcome = run_worker(tmp_path_factory.mktemp("job"), 60, MEMORY_LIMIT_GB)
    assert len(seen) == 1 and not outcome.timed_out
    return seen[0]


def test_a_real_worker_starts_without_secrets(spawned: Spawned):
    assert spawned.environ.get("HARMLESS") == "yes", "the worker's environment was not read"
    leaked = sorted(SECRETS.keys() & spawned.environ.keys())
    assert not leaked, f"secrets in the worker's environment: {leaked}"


def _unshare(flags: int) -> bool:
    return ctypes.CDLL(None, use_errno=True).unshare(flags) == 0


def _os_allows_a_network_namespace() -> bool:
    """Can a child of ours get its own network namespace? Probed without the harness's code."""

    def unshare() -> None:  # as root, or else through a user namespace
        if not _unshare(CLONE_NEWNET):
            _unshare(CLONE_NEWUSER | CLONE_NEWNET)

    probe = subprocess.run(
        ["readlink", "/proc/self/ns/net"], preexec_fn=unshare, capture_output=True, text=True
    )
    return probe.stdout.strip() not in ("", os.readlink("/proc/self/ns/net"))


def test_a_real_worker_has_a_network_namespace_of_its_own(spawned: Spawned):
    if not _os_allows_a_network_namespace():
        pytest.skip("the OS allows no private network namespace here")
    assert spawned.net_namespace != os.readlink("/proc/self/ns/net")


def test_a_real_cpu_worker_has_an_address_space_limit(spawned: Spawned):
    row = next(line for line in spawned.limits.splitlines() if line.startswith("Max address space"))
    limit = str(MEMORY_LIMIT_GB * 2**30)
    assert row.split()[3:5] == [limit, limit], row
