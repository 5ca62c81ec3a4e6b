"""Every worker process is started by one long-lived thread of kernelpilot's process.

bubblewrap's ``--die-with-parent`` (``PR_SET_PDEATHSIG``) kills a sandbox when the *thread*
that started it ends, not the process: a worker started from a thread that ends before it (a
search step's pool thread that started a GPU's comparator, which lives on for the problem's
later candidates) was killed with SIGKILL at that moment. Started here, a worker lives until it
ends or is released.

The spawner also registers each worker (``harness.sandbox.lifetime``) before handing it over,
so a worker it started is tracked even when the thread that asked for it was interrupted
while it waited: a run that is stopping has it killed at once.
"""

from __future__ import annotations

import queue
import subprocess
import threading
from concurrent.futures import Future, wait
from typing import Any

from harness.sandbox import lifetime

_requests: queue.SimpleQueue[tuple[dict[str, Any], Future[subprocess.Popen]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def popen(**arguments: Any) -> subprocess.Popen:
    """``subprocess.Popen(**arguments)``, started by the spawner thread and registered; raises
    what starting it raised, or ``Interrupted`` where the run is stopping."""
    done: Future[subprocess.Popen] = Future()
    _requests.put((arguments, done))
    _ensure_running()
    try:
        return done.result()
    except BaseException:
        # The caller was interrupted while it waited (or the start failed): one not begun is
        # never begun; one begun is waited for (its files are the caller's, closed after
        # this) and ended.
        if not done.cancel():
            wait([done])
            if done.exception() is None:
                lifetime.release(done.result())
        raise


def _ensure_running() -> None:
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name="kernelpilot-spawner", daemon=True)
            _thread.start()


def _serve() -> None:
    while True:
        arguments, done = _requests.get()
        if not done.set_running_or_notify_cancel():  # its caller no longer waits
            continue
        try:
            process = subprocess.Popen(**arguments)
        except BaseException as err:  # handed to the thread that asked
            done.set_exception(err)
            continue
        try:
            lifetime.register(process)  # a stopping run kills it here and raises
        except BaseException as err:
            done.set_exception(err)
            continue
        done.set_result(process)
