"""A line every half minute while a request to the model is outstanding.

A reasoning model can take minutes to answer, and a hung endpoint takes as long as its timeout:
without a sign of life the terminal looks frozen. The request blocks its thread, so the lines
come from a thread of their own, which ends with the request.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

HEARTBEAT_S = 30.0


class Heartbeat:
    """While in use, ``say(line())`` every ``every_s`` seconds; ``line`` gets the seconds
    waited so far."""

    def __init__(
        self, say: Callable[[str], None] | None, line: Callable[[float], str], every_s: float
    ) -> None:
        self._say, self._line, self._every_s = say, line, every_s
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Heartbeat:
        if self._say is not None:
            self._thread = threading.Thread(target=self._beat, name="llm-heartbeat", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        assert self._say is not None
        started = time.monotonic()
        while not self._done.wait(self._every_s):
            self._say(self._line(time.monotonic() - started))
