"""A run's workers and scratch folders end with it (``harness.sandbox.lifetime``), and only the run's:
what was started before it (an evaluator of a test) is left alone, unless a signal ends the
whole process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from harness.sandbox import lifetime
from tests.conftest import ROOT


def sleeper() -> subprocess.Popen:
    """A worker-like process: the leader of its own group, with a child of its own."""
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', " \
             "'import time; time.sleep(600)']); time.sleep(600)"  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", script], start_new_session=True)


def group_alive(process: subprocess.Popen) -> bool:
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_run_ends_its_workers_groups_and_scratch_but_not_what_came_before():
    outer_worker, outer_dir = sleeper(), lifetime.scratch("outer-")
    lifetime.register(outer_worker)
    try:
        with lifetime.stopping_cleanly():
            worker, folder = sleeper(), lifetime.scratch("evaluator-")
            lifetime.register(worker)
            (folder / "cases.pt").write_bytes(b"x")
        assert worker.poll() is not None and not group_alive(worker)  # its child went too
        assert not folder.exists()
        assert outer_worker.poll() is None and outer_dir.is_dir()
        assert lifetime.scratch("later-").parent == outer_dir.parent  # the outer root again
    finally:
        lifetime.release(outer_worker)
    assert not group_alive(outer_worker)


def test_an_error_in_the_run_still_ends_its_workers():
    with pytest.raises(ValueError), lifetime.stopping_cleanly():
        worker = sleeper()
        lifetime.register(worker)
        raise ValueError("a bug")
    assert not group_alive(worker)


def test_nothing_starts_once_the_run_is_stopping():
    with pytest.raises(lifetime.Interrupted), lifetime.stopping_cleanly():
        lifetime._run.stopping = 2  # as the first Ctrl-C leaves it
        late = sleeper()
        lifetime.register(late)  # a thread starting a build after the interrupt
    assert not group_alive(late) and lifetime.live_workers() == 0


def test_an_interrupt_lost_in_a_finalizer_is_not_printed_and_ends_the_run_at_the_next_check(
    monkeypatch,
):
    printed: list[BaseException | None] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda unraisable: printed.append(unraisable.exc_value)
    )

    class Finalized:
        def __del__(self) -> None:
            raise lifetime.Interrupted()  # as a signal's exception landing in a finalizer

    class Broken:
        def __del__(self) -> None:
            raise ValueError("a finalizer's own bug")

    with pytest.raises(lifetime.Interrupted), lifetime.stopping_cleanly():
        Finalized()
        Broken()
        lifetime._run.stopping = signal.SIGINT
        lifetime.check()
    assert [type(error) for error in printed] == [ValueError]  # only what is not ours


def test_a_signal_landing_inside_a_serializer_is_the_stop_not_a_failure():
    """A Ctrl-C whose Interrupted is raised inside pydantic's serializer comes out wrapped
    (PydanticSerializationError): the run still ends as interrupted, not as kernelpilot's bug."""
    from pathlib import Path

    from pydantic import BaseModel, field_serializer

    class Job(BaseModel):
        folder: Path

        @field_serializer("folder")
        def _stopped_here(self, folder: Path) -> str:
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises in this frame
            return str(folder)

    with pytest.raises(lifetime.Interrupted) as stopped, lifetime.stopping_cleanly():
        Job(folder=Path("/tmp")).model_dump_json()
    assert stopped.value.signal_number == signal.SIGINT
    assert "Interrupted" in repr(stopped.value.__cause__)  # what pydantic made of it


def test_the_temporary_folder_is_found_before_a_stop_can_land():
    """Python's first tempfile call writes a probe file into TMPDIR and removes it; a Ctrl-C in
    between (the run's first scratch folder, right after its first progress line) left the file
    behind. A run finds the folder before it takes stop signals."""
    probe = (
        "import tempfile\n"
        "from harness.sandbox import lifetime\n"
        "with lifetime.stopping_cleanly():\n"
        "    print(tempfile.tempdir is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, cwd=ROOT)  # fmt: skip
    assert done.stdout.strip() == "True", done.stderr
