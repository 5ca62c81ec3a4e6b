"""A crashing, a hanging and a wrong candidate each end as their own status; the run goes on.

And code in a worker that ``run_worker`` really started in its sandbox (``tests/sandbox/probe.py``)
finds no secrets in its environment, no parent or other process, no file its job does not name,
no network, a read-only checkout and an address-space limit, and nothing it starts outlives it.
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox.bubblewrap import SandboxUnavailable, WorkerView, python_paths
from harness.sandbox.environment import clean_environment
from harness.sandbox.run import run_worker
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
    # Their workers died before checking the network: no line for a check that did not run
    # (every dead worker's verdict had a false "the OS did not allow a private network").
    for dead in ("crash", "spin"):
        assert "network_isolated" not in [check.name for check in results[dead].checks]
    assert results["wrong"].status is Status.incorrect
    failed = [check.name for check in results["wrong"].checks if not check.passed]
    assert "correct_outputs" in failed
    honest = results["honest"]
    assert honest.status is Status.ok, honest.reason + honest.log
    assert honest.timings.eager and honest.timings.candidate and honest.vs_eager is not None
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


# --- what code in a real worker's sandbox can reach (tests/sandbox/probe.py tries) -----------
MEMORY_LIMIT_GB = 8
SECRETS = {"GITHUB_TOKEN": "ghs_secret", "OPENAI_API_KEY": "sk-secret", "DB_PASSWORD": "hunter2"}
RUNNER_VARIABLES = {"GITHUB_OUTPUT": "/runner/_temp/out", "ACTIONS_RUNTIME_URL": "http://x"}


@dataclass(frozen=True)
class Probe:
    findings: dict
    leave_behind: Path
    checkout: Path


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory) -> Probe:
    """One real sandboxed worker, started by run_worker with secrets in our environment, a
    secret file in a folder its job does not name, a listener on loopback and a checkout it
    may read: the probe reports what it could reach, and leaves a process behind."""
    root = tmp_path_factory.mktemp("machine")
    home, checkout, job_dir = root / "home", root / "checkout", root / "job"
    for folder in (home, checkout, job_dir):
        folder.mkdir()
    (home / "credentials").write_text("the runner's secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    leave_behind = job_dir / "outlived.txt"
    plan = {
        "parent_pid": os.getpid(), "secret_file": str(home / "credentials"), "home": str(home),
        "checkout": str(checkout), "port": listener.getsockname()[1],
        "leave_behind": str(leave_behind),
    }  # fmt: skip
    (job_dir / "probe.json").write_text(json.dumps(plan))
    view = WorkerView(read_only=[checkout])
    with pytest.MonkeyPatch.context() as patch, listener:
        for name, value in {**SECRETS, **RUNNER_VARIABLES, "HARMLESS": "yes"}.items():
            patch.setenv(name, value)
        outcome = run_worker(
            job_dir, 120, MEMORY_LIMIT_GB, view, "bubblewrap", entry="tests.sandbox.probe"
        )
    assert outcome.results(), outcome.log_tail
    return Probe(outcome.results()[0].body, leave_behind, checkout)


def test_a_real_worker_starts_without_secrets(probed: Probe):
    environ = probed.findings["environ"]
    assert environ.get("HARMLESS") == "yes", "the worker's environment was not read"
    leaked = sorted((SECRETS.keys() | RUNNER_VARIABLES.keys()) & environ.keys())
    assert not leaked, f"secrets or runner variables in the worker's environment: {leaked}"


def test_a_sandboxed_worker_cannot_see_the_parent_or_other_processes(probed: Probe):
    assert probed.findings["parent_environ"] is None, "the worker read its parent's environ"
    assert os.getpid() not in probed.findings["visible_pids"]
    assert len(probed.findings["visible_pids"]) <= 3, probed.findings["visible_pids"]


def test_a_sandboxed_worker_sees_no_file_its_job_does_not_name(probed: Probe):
    assert probed.findings["secret_file"] is None, "the worker read a file outside its view"
    assert probed.findings["home_listing"] is None


def test_a_sandboxed_worker_reads_the_checkout_but_cannot_write_it(probed: Probe):
    assert probed.findings["checkout_writable"] is False
    assert probed.findings["job_dir_writable"] is True


def test_a_sandboxed_worker_has_no_network(probed: Probe):
    assert probed.findings["network"] is False, "the worker reached a listener on loopback"


def test_nothing_a_sandboxed_worker_starts_outlives_it(probed: Probe):
    time.sleep(5)  # the left-behind process writes 3 s after it started, if it still lives
    assert not probed.leave_behind.exists(), "a process the worker started outlived it"


def test_a_real_cpu_worker_has_an_address_space_limit(probed: Probe):
    limits = probed.findings["limits"]
    row = next(line for line in limits.splitlines() if line.startswith("Max address space"))
    limit = str(MEMORY_LIMIT_GB * 2**30)
    assert row.split()[3:5] == [limit, limit], row


def test_the_parent_is_not_dumpable_once_it_started_a_sandbox(probed: Probe):
    """Its memory and /proc entries (the LLM key, the tokens) are closed to other processes of
    the same user, sandboxed or not."""
    PR_GET_DUMPABLE = 3
    assert ctypes.CDLL(None, use_errno=True).prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0


def test_a_missing_bubblewrap_is_a_clear_error_not_a_downgrade(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELPILOT_BWRAP", str(tmp_path / "no-bwrap"))
    with pytest.raises(SandboxUnavailable) as raised:
        run_worker(tmp_path, 30, None, WorkerView(), "bubblewrap", entry="tests.sandbox.probe")
    assert "bubblewrap" in raised.value.what and "apt-get install bubblewrap" in raised.value.fix


def test_a_sandbox_the_machine_refuses_is_a_clear_error(tmp_path, monkeypatch):
    fake = tmp_path / "bwrap"
    fake.write_text(
        "#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("KERNELPILOT_BWRAP", str(fake))
    with pytest.raises(SandboxUnavailable) as raised:
        run_worker(tmp_path, 30, None, WorkerView(), "bubblewrap", entry="tests.sandbox.probe")
    assert "No permissions to creating new namespace" in raised.value.what
    assert "user namespaces" in raised.value.fix


def test_a_python_installed_at_the_root_does_not_show_the_whole_machine(monkeypatch):
    monkeypatch.setattr(sys, "prefix", "/")
    monkeypatch.setattr(sys, "exec_prefix", "/")
    monkeypatch.setattr(sys, "path", [*sys.path, "/"])
    assert Path("/") not in python_paths()


def test_a_search_path_at_tmp_does_not_show_the_machines_tmp(tmp_path, monkeypatch):
    """kernelpilot started by a script in /tmp has /tmp first on its search path: the sandbox
    still gets its own empty, writable /tmp, not the machine's with every other job's files."""
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="kp-other-job-") as planted:
        planted.write("another job's scratch")
        planted.flush()
        (tmp_path / "probe.json").write_text(json.dumps({"secret_file": planted.name}))
        monkeypatch.setattr(sys, "path", ["/tmp", *sys.path])
        outcome = run_worker(
            tmp_path, 60, MEMORY_LIMIT_GB, WorkerView(), "bubblewrap", entry="tests.sandbox.probe"
        )
    assert outcome.results(), outcome.log_tail
    findings = outcome.results()[0].body
    assert findings["secret_file"] is None, "the worker read a file in the machine's /tmp"
    assert "/tmp" in findings["writable_mounts"]


def test_an_unsandboxed_worker_has_its_own_temporary_folder(tmp_path, monkeypatch):
    """As a sandboxed worker's private /tmp: what it leaves there (a worker killed inside Python's
    first tempfile call leaves a probe file) goes with its job folder, not into the run's TMPDIR.
    torch.compile's cache stays the one torch would use, shared by every worker."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    (tmp_path / "probe.json").write_text("{}")
    outcome = run_worker(tmp_path, 60, None, WorkerView(), "off", entry="tests.sandbox.probe")
    assert outcome.results(), outcome.log_tail
    environ = outcome.results()[0].body["environ"]
    assert environ["TMPDIR"] == str(tmp_path / "tmp")
    assert environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
