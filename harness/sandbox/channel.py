"""The parent's side of a worker's channel (``harness.sandbox.run``): the newline-delimited
JSON messages it sends on its pipe, read as they arrive and bounded, and the answers the
parent writes back on its stdin (outputs ready: go on?; a build; a timing window opened or
closed, during which builds pause: ``harness.sandbox.quiet``). Everything a worker sends is
untrusted: a message that is not JSON or not ``{kind, body}`` is an error, never acted on.
"""

from __future__ import annotations

import json
import os
import select
from collections.abc import Callable

from pydantic import ValidationError

from harness.sandbox import quiet
from harness.sandbox.jobs import WorkerMessage

CHANNEL_LIMIT = 16 * 2**20  # bytes a worker may send on its channel


class ChannelReader:
    """Newline-delimited JSON messages from a worker's pipe, read as they arrive."""

    def __init__(self, channel) -> None:
        self.channel = channel
        self.buffer = b""
        self.received = 0
        self.messages: list[WorkerMessage] = []
        self.error: str | None = None
        self.closed = False

    def __enter__(self) -> ChannelReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def poll(self, seconds: float) -> None:
        if self.closed or not select.select([self.channel], [], [], seconds)[0]:
            return
        chunk = os.read(self.channel.fileno(), 1 << 16)
        if not chunk:
            self.closed = True
            return
        self.received += len(chunk)
        if self.received > CHANNEL_LIMIT:
            self.error, self.closed = f"the worker sent over {CHANNEL_LIMIT} bytes", True
            return
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except ValueError:
                self.error = "the worker sent a message that is not JSON"
                continue
            try:
                self.messages.append(WorkerMessage.model_validate(message))
            except ValidationError:
                self.error = "the worker sent a message that is not {kind, body}"

    def drain(self) -> None:
        while not self.closed:
            self.poll(0.5)
            if not select.select([self.channel], [], [], 0)[0]:
                break


class Answers:
    """What the parent says to a worker's questions (outputs ready: go on?; builds) and does on
    its news (a timing window opened or closed: builds pause meanwhile)."""

    def __init__(
        self,
        on_outputs: Callable[[object], bool] | None,
        on_build: Callable[[object], dict] | None,
    ) -> None:
        self.on_outputs, self.on_build = on_outputs, on_build
        self.windows = 0  # timing windows this worker opened and has not closed

    def close_windows(self) -> None:
        """The worker is done: whatever window it left open closes."""
        for _ in range(self.windows):
            quiet.window_closed()
        self.windows = 0

    def __call__(self, message: WorkerMessage) -> bytes | None:
        if message.kind == "timing":
            opened = isinstance(message.body, dict) and message.body.get("open") is True
            if opened and self.windows == 0:
                self.windows = 1
                quiet.window_opened()
            elif not opened:
                self.close_windows()
            # the worker times once the builds are stopped: it waits for this line
            return b"quiet\n" if opened else None
        if message.kind == "build":
            # A build asked for during a window (load_inline in forward, a cache miss) would
            # start stopped while this thread, the one that closes the window, waits for it.
            self.close_windows()
        if message.kind == "outputs":
            go = self.on_outputs(message.body) if self.on_outputs else True
            return b"go\n" if go else b"stop\n"
        if message.kind == "build":
            built = (
                self.on_build(message.body)
                if self.on_build
                else {"key": "", "error": "no builds here"}
            )
            return json.dumps(built).encode() + b"\n"
        return None
