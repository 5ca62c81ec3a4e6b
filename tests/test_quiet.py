"""Builds pause while a candidate is timed (``harness.sandbox.quiet``): every process of a
build's tree is stopped while a timing window is open and goes on after; a build started
meanwhile starts stopped; its time stopped does not count against its limit; and a real timing
worker opens and closes a window around each of its timing loops."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, Status
from harness.sandbox import quiet
from harness.sandbox.bubblewrap import WorkerView
from harness.sandbox.run import run_worker
from tests.conftest import FIXTURES, fast_config

# A parent that starts a child; both count, each in its own file, every 10 ms.
TREE = """
import subprocess, sys, time
from pathlib import Path
count = (
    "import sys, time\\nfrom pathlib import Path\\nn = 0\\nwhile True:\\n    n += 1\\n"
    "    Path(sys.argv[1]).write_text(str(n))\\n    time.sleep(0.01)\\n"
)
child = subprocess.Popen([sys.executable, "-c", count, sys.argv[2]])
n = 0
while True:
    n += 1
    Path(sys.argv[1]).write_text(str(n))
    time.sleep(0.01)
"""


def _count(path: Path) -> int:
    text = path.read_text() if path.exists() else ""
    return int(text) if text else 0


def _eventually(condition, seconds: float = 20.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _states(pid: int) -> list[str]:
    """The state letter of ``pid`` and of every descendant."""
    states, todo = [], [pid]
    while todo:
        current = todo.pop()
        stat = Path(f"/proc/{current}/stat").read_text()
        states.append(stat.rsplit(")", 1)[1].split()[0])
        for entry in Path("/proc").glob("[0-9]*/stat"):
            try:
                if int(entry.read_text().rsplit(")", 1)[1].split()[1]) == current:
                    todo.append(int(entry.parent.name))
            except (OSError, ValueError, IndexError):
                continue
    return states


@pytest.fixture
def tree(tmp_path):
    parent, child = tmp_path / "parent", tmp_path / "child"
    process = subprocess.Popen([sys.executable, "-c", TREE, str(parent), str(child)])
    deadline = time.monotonic() + 30
    while _count(child) == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    yield process, parent, child
    quiet.window_closed()  # a failed assertion must not leave the module's state open
    subprocess.run(["pkill", "-KILL", "-P", str(process.pid)], check=False)
    process.kill()
    process.wait()


def test_a_build_tree_stops_while_a_window_is_open_and_goes_on_after(tree):
    process, parent, child = tree
    with quiet.build(process):
        paused_before = quiet.paused_seconds()
        quiet.window_opened()
        time.sleep(0.2)
        assert set(_states(process.pid)) == {"T"}, _states(process.pid)
        counts = _count(parent), _count(child)
        time.sleep(0.5)
        assert (_count(parent), _count(child)) == counts, "a stopped build went on"
        quiet.window_closed()
        assert _eventually(lambda: _count(parent) > counts[0] and _count(child) > counts[1])
        assert "T" not in _states(process.pid)
        assert quiet.paused_seconds() - paused_before >= 0.7


def test_a_build_started_during_a_window_starts_stopped(tree):
    process, parent, _ = tree
    quiet.window_opened()
    try:
        with quiet.build(process):
            time.sleep(0.2)
            count = _count(parent)
            time.sleep(0.4)
            assert _count(parent) == count and "T" in _states(process.pid)
    finally:
        quiet.window_closed()


def test_time_stopped_does_not_count_against_a_builds_limit(tmp_path):
    """A worker that runs 2 s of its own, limited to 3 s, paused 3 s in the middle: done."""
    (tmp_path / "probe.json").write_text('{"sleep": 2}')
    opened = []

    def open_later() -> None:
        time.sleep(0.5)
        quiet.window_opened()
        opened.append(time.monotonic())
        time.sleep(3)
        quiet.window_closed()

    import threading

    thread = threading.Thread(target=open_later)
    thread.start()
    started = time.monotonic()
    outcome = run_worker(tmp_path, 3, None, WorkerView(), "off", entry="tests.sandbox.sleeper",
                         pausable=True)  # fmt: skip
    thread.join()
    assert not outcome.timed_out, outcome.log_tail
    assert time.monotonic() - started > 4.5 and opened
    assert outcome.results() and outcome.results()[0].body == {"slept": 2}


def test_a_timing_worker_opens_a_window_around_each_timing_loop(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(quiet, "window_opened", lambda: events.append("open"))
    monkeypatch.setattr(quiet, "window_closed", lambda: events.append("close"))
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), "cpu", "float32")
    evaluator = Evaluator(fast_config(), seed=3)
    result = evaluator.evaluate(
        problem, Candidate(source=(FIXTURES / "isolation_honest.py").read_text())
    )
    assert result.status in (Status.ok, Status.unjudged), result.reason
    # settle, alone, beside, after: each opened and closed, never two at once (in each timing
    # worker: a busy machine times again)
    workers = len(events) // 8
    assert workers >= 1 and events == ["open", "close"] * 4 * workers, events


def test_a_build_asked_for_during_a_window_is_not_paused():
    """A candidate that builds inside a timed call (load_inline in its forward, a cache miss):
    its build would start stopped while the thread that closes the window waits for it."""
    from harness.sandbox.channel import Answers
    from harness.sandbox.jobs import WorkerMessage

    seen = []

    def build(body):
        seen.append(quiet._state.windows)
        return {"key": "", "error": "not here"}

    answers = Answers(None, build)
    try:
        assert answers(WorkerMessage(kind="timing", body={"open": True})) == b"quiet\n"
        assert quiet._state.windows == 1
        answers(WorkerMessage(kind="build", body={}))
        assert seen == [0], "the build was asked for with the window open"
    finally:
        answers.close_windows()
    assert quiet._state.windows == 0
