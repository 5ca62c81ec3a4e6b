"""A worker lives until it ends or is released, whichever thread asked for it
(harness.sandbox.spawner): bubblewrap's --die-with-parent kills a sandbox when the thread that
started it ends, and workers are asked for from threads that end before them."""

from __future__ import annotations

import json
import threading
import time

from harness.sandbox.bubblewrap import WorkerView
from harness.sandbox.run import finish_worker, start_worker


def test_a_sandboxed_worker_outlives_the_thread_that_asked_for_it(tmp_path):
    """A search step's pool thread starts a GPU's comparator and ends with the step; the
    comparator goes on, for the problem's later candidates."""
    (tmp_path / "probe.json").write_text(json.dumps({"sleep": 3}))
    started: dict = {}

    def ask() -> None:
        started["at"] = time.monotonic()
        started["worker"] = start_worker(
            tmp_path, None, WorkerView(), "bubblewrap", entry="tests.sandbox.sleeper"
        )
        time.sleep(1)  # the sandbox is up and watching this thread

    thread = threading.Thread(target=ask)
    thread.start()
    thread.join()
    process, reader = started["worker"]
    outcome = finish_worker(process, reader, tmp_path, 30, started["at"])
    assert outcome.signal_name is None and outcome.returncode == 0, outcome.log_tail
    assert [message.body for message in outcome.results()] == [{"slept": 3}]
