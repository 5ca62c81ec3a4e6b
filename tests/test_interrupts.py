"""Stopping a run at every phase: Ctrl-C (once or twice), SIGTERM, during the reference, the
offline proposer, a build, the checks, the timing and an LLM call. Each time the command says
what it kept and exits 128 + the signal, no process of it is left running, its TMPDIR is
empty, and what it saved resumes to the end.

The moments are the run's own progress lines: one uninterrupted run lists them, then a run is
stopped at each in turn (``tests.interrupting``).
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path

import pytest

from agents.trajectory import Trajectory
from tests.conftest import FIXTURES
from tests.fake_openai import reply, slow
from tests.interrupting import environment, leftovers, run_cli, scratch_left
from tests.test_agent_loop import HONEST, code, plan

PROBLEM = str(FIXTURES / "scale_problem.py")
PROJECT = """
[tool.kernelpilot.eval]
compile_baseline = false
busy_retries = 0
time_budget_s = 0.5
min_reps = 5
max_reps = 50
[tool.kernelpilot.search]
seed_offline = false
root_first = 1
attempts = 2
"""
COMPILING = "compiling kernel module"
PRECOMPILING = "precompiling torch's headers"  # after the first build of a fresh cache only


def script(tmp: Path) -> Path:
    """Step 1: a plan and a C++ kernel that is verified. Step 2: the script has run out (a
    failed call). A resumed run starts the script again: its steps repeat the kernel."""
    path = tmp / "script.json"
    line = "        return torch.tanh(x) * self.scale + x"
    path.write_text(json.dumps([
        {"role": "planner", "text": plan(line, "One C++ loop for tanh, scale and add.")},
        {"role": "coder", "text": code(HONEST)},
    ]))  # fmt: skip
    return path


def optimize_args(tmp: Path, out: str, *extra: str) -> list[str]:
    return ["optimize", PROBLEM, "--device", "cpu", "--llm", "scripted", "--script",
            str(script(tmp)), "--seed", "5", "--out", str(tmp / out), *extra]  # fmt: skip


def assert_stopped_cleanly(ran, tmp: Path, signal_number: int) -> None:
    assert ran.returncode == 128 + signal_number, ran.stderr
    assert "interrupted: every worker was stopped" in ran.stderr
    assert "Traceback" not in ran.stderr and "Exception ignored" not in ran.stderr, ran.stderr
    assert leftovers(ran.mark) == []
    assert scratch_left(tmp) == []


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    return tmp_path


def test_optimize_interrupted_at_each_phase_leaves_nothing_and_resumes(project: Path):
    tmp = project
    # A build, stopped while it compiles (the cache is the test's own: it compiles here).
    # Sandbox off: nothing but kernelpilot's own ending stops the compiler (bubblewrap's
    # --die-with-parent would otherwise hide a worker left behind).
    unsandboxed = environment(tmp, KERNELPILOT_SANDBOX="off")
    ran = run_cli(optimize_args(tmp, "out-build"), tmp, unsandboxed,
                  stop_at=lambda i, line: COMPILING in line)  # fmt: skip
    assert any(COMPILING in line for line in ran.lines), ran.stderr
    assert_stopped_cleanly(ran, tmp, signal.SIGINT)

    # Then stopped while it precompiles torch's headers for the builds after the first: the
    # half-made headers are not left to be used (none is in the cache's headers folder).
    ran = run_cli(optimize_args(tmp, "out-headers"), tmp, unsandboxed,
                  stop_at=lambda i, line: PRECOMPILING in line)  # fmt: skip
    assert any(PRECOMPILING in line for line in ran.lines), ran.stderr
    assert_stopped_cleanly(ran, tmp, signal.SIGINT)
    [headers] = (tmp / "cache").rglob(".pch")
    assert [entry.name for entry in headers.iterdir()] == [".staging"]
    assert not any((headers / ".staging").iterdir())

    whole = run_cli(optimize_args(tmp, "out-whole"), tmp, environment(tmp))
    assert whole.returncode == 0, whole.stderr
    # built once and its headers precompiled (once): cached now, so no later run says either
    moments = [line for line in whole.lines if COMPILING not in line and PRECOMPILING not in line]
    for phase in ("reference", "offline proposer", "checking", "timing", "step 1", "step 2"):
        assert any(phase in line for line in moments), (phase, moments)

    for index, moment in enumerate(moments[:-1]):
        # Ctrl-C once, twice (the second lands while it stops), or SIGTERM (a runner's cancel)
        signals = [(signal.SIGINT,), (signal.SIGINT, signal.SIGINT), (signal.SIGTERM,)][index % 3]
        out = tmp / f"out-{index}"
        sandbox = environment(tmp, KERNELPILOT_SANDBOX=["off", "bubblewrap"][index % 2])
        ran = run_cli(optimize_args(tmp, out.name), tmp, sandbox,
                      stop_at=lambda i, line, index=index: i == index, signals=signals)  # fmt: skip
        assert _shape(ran.lines[index]) == _shape(moment), (ran.lines, moments)
        assert_stopped_cleanly(ran, tmp, signals[0])
        saved = out / "trajectory-scale_problem.json"
        if not saved.exists():  # stopped before its search began: nothing to resume
            assert "no target had finished" in ran.stderr and "--resume" not in ran.stderr
            continue
        assert f"kernelpilot optimize --resume {saved}" in ran.stderr
        assert Trajectory.load(saved).stopped == "interrupted"
        resumed = run_cli(optimize_args(tmp, out.name, "--resume", str(saved)), tmp,
                          environment(tmp))  # fmt: skip
        assert resumed.returncode == 0, (moment, resumed.stderr)
        row = json.loads((out / "report.json").read_text())["targets"][0]
        assert row["status"] == "ok", (moment, row["reason"])
        assert leftovers(resumed.mark) == [] and scratch_left(tmp) == []


def test_an_interrupted_llm_call_stops_at_once_and_resumes(project: Path, fake_openai):
    tmp = project
    line = "        return torch.tanh(x) * self.scale + x"
    fake_openai.push(slow(600, then=reply(plan(line, "One C++ loop."))))
    env = environment(tmp, OPENAI_BASE_URL=fake_openai.base_url, OPENAI_API_KEY="sk-test")
    args = ["optimize", PROBLEM, "--device", "cpu", "--llm", "openai", "--model", "fake-model",
            "--seed", "5", "--out", str(tmp / "out")]  # fmt: skip

    ran = run_cli(
        args, tmp, env, stop_at=lambda i, line: "tree search" in line and _asked(fake_openai)
    )
    assert len(fake_openai.requests) == 1  # stopped while the planner's call was held
    assert_stopped_cleanly(ran, tmp, signal.SIGINT)
    saved = tmp / "out" / "trajectory-scale_problem.json"
    assert Trajectory.load(saved).stopped == "interrupted"

    fake_openai.push(reply(plan(line, "One C++ loop.")), reply(code(HONEST)))
    resumed = run_cli([*args, "--resume", str(saved), "--budget", "1"], tmp, env)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp / "out" / "report.json").read_text())["targets"][0]["status"] == "ok"


def _shape(line: str) -> str:
    """A progress line without its measurements (times and speedups differ run to run)."""
    return re.sub(r"\d+(\.\d+)?", "N", line)


def _asked(server, wait_s: float = 120.0) -> bool:
    """Wait until the server holds the first request (the command is inside its LLM call)."""
    import time

    ends = time.monotonic() + wait_s
    while not server.requests and time.monotonic() < ends:
        time.sleep(0.05)
    return bool(server.requests)
