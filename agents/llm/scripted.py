"""``ScriptedClient``: replays replies from a file, so demos and tests run the whole loop offline.

Script format: a JSON list of reply objects, or JSON lines (one object per line; blank lines
skipped). Replies are handed out in order, one per ``complete`` call, whoever calls::

    [
      {"role": "planner", "text": "<<<IMPROVE BEGINS>>>...", "prompt_tokens": 900,
       "completion_tokens": 120},
      {"role": "coder", "file": "candidates/fused.py"},
      {"role": "debugger", "error": "call_failed", "text": "HTTP 503"}
    ]

Keys: ``text`` (the reply) or ``file`` (a path relative to the script whose content is the reply,
so real candidate files are replayed as they are); ``role`` ("planner" | "coder" | "debugger" |
null) says whom the reply is written for: it is recorded with the call, so a test can check that
the right role got it; ``prompt_tokens``, ``completion_tokens`` (default 0), ``cached_tokens``
(of the prompt tokens, those a provider's prompt cache served; default unknown), ``cost_usd``
(default unknown), ``finish_reason`` (default "stop"); ``error``: "call_failed" or "fatal" makes
that call raise ``LLMCallFailed`` / ``LLMFatalError`` with ``text`` as the message instead.
When the script runs out, calls raise ``LLMCallFailed("script exhausted")``; once the call's
deadline has passed, ``LLMDeadlineReached``, and the reply stays for the next call.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agents.llm.client import (
    Deadline,
    LLMCallFailed,
    LLMDeadlineReached,
    LLMFatalError,
    Message,
    Reply,
    Role,
)
from harness.errors import UserError
from harness.files import read_user_text


class ScriptedReply(BaseModel):
    """One entry of a reply script (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    role: Role | None = Field(default=None, description="Whom the reply is written for.")
    text: str | None = Field(default=None, description="The reply, or the error's message.")
    file: Path | None = Field(default=None, description="File holding the reply (script-relative).")
    prompt_tokens: int = Field(default=0, ge=0, description="Reported input tokens.")
    completion_tokens: int = Field(default=0, ge=0, description="Reported output tokens.")
    cached_tokens: int | None = Field(
        default=None, ge=0, description="Reported cached prompt tokens; None unknown."
    )
    cost_usd: float | None = Field(default=None, ge=0, description="Reported cost; None unknown.")
    finish_reason: str | None = Field(default="stop", description="Reported finish reason.")
    error: Literal["call_failed", "fatal"] | None = Field(
        default=None, description="Raise this failure instead of replying."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ScriptedReply:
        if (self.text is None) == (self.file is None):
            raise ValueError("give exactly one of `text` and `file`")
        if self.cached_tokens is not None and self.cached_tokens > self.prompt_tokens:
            raise ValueError("`cached_tokens` is more than `prompt_tokens`: they are of them")
        return self


class ScriptedCall(BaseModel):
    """One ``complete`` call the scripted client answered, for tests to inspect."""

    messages: list[Message]
    temperature: float | None
    max_tokens: int | None
    role: Role | None = Field(description="The role the consumed script entry was written for.")


class ScriptedClient:
    """An ``LLMClient`` that answers from a script, in order; thread-safe."""

    def __init__(self, replies: Sequence[ScriptedReply], *, model: str = "scripted") -> None:
        self.model = model
        self._replies = list(replies)
        self._next = 0
        self._lock = threading.Lock()
        self.calls: list[ScriptedCall] = []

    @classmethod
    def from_file(cls, path: Path, *, model: str = "scripted") -> ScriptedClient:
        """Load a script; ``file`` entries are read now, so a missing one stops the run early."""
        return cls(load_script(path), model=model)

    @property
    def temperatures(self) -> list[float | None]:
        """The temperature of every call so far, in order."""
        return [call.temperature for call in self.calls]

    @property
    def remaining(self) -> int:
        """Replies not yet handed out."""
        return len(self._replies) - self._next

    def complete(
        self,
        messages: list[Message],
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        deadline: Deadline | None = None,
        role: Role | None = None,
    ) -> Reply:
        """The next reply; none is taken once ``deadline`` has passed (the call fails as the
        openai client's would, before sending anything)."""
        if deadline is not None and deadline.left() <= 0:
            raise LLMDeadlineReached(
                f"{deadline.what} ran out before the {role or 'model'}'s call",
                f"scripted model {self.model!r}",
                attempts=0,
            )
        with self._lock:
            if self._next >= len(self._replies):
                raise LLMCallFailed(
                    "script exhausted",
                    f"scripted model {self.model!r} after {len(self._replies)} replies",
                    "add replies to the script or lower the attempt budget",
                    attempts=1,
                )
            entry = self._replies[self._next]
            self._next += 1
            self.calls.append(
                ScriptedCall(
                    messages=list(messages),
                    temperature=temperature,
                    max_tokens=max_tokens,
                    role=entry.role,
                )
            )
        text = entry.text or ""
        if entry.error == "call_failed":
            raise LLMCallFailed(text, f"scripted model {self.model!r}", attempts=1)
        if entry.error == "fatal":
            raise LLMFatalError(text, f"scripted model {self.model!r}", attempts=1)
        return Reply(
            text=text,
            model=self.model,
            prompt_tokens=entry.prompt_tokens,
            completion_tokens=entry.completion_tokens,
            cached_tokens=entry.cached_tokens,
            cost_usd=entry.cost_usd,
            finish_reason=entry.finish_reason,
            seconds=0.0,
            attempts=1,
        )


def load_script(path: Path) -> list[ScriptedReply]:
    """The entries of a reply script, with ``file`` entries read into ``text``."""
    path = Path(path)
    try:
        source = read_user_text(path, "reply script")
    except UserError as err:
        raise LLMFatalError(err.what, err.where, err.fix) from None
    try:
        if source.lstrip().startswith("["):
            raw = json.loads(source)
        else:
            raw = [json.loads(line) for line in source.splitlines() if line.strip()]
    except json.JSONDecodeError as err:
        raise LLMFatalError(
            f"the reply script is not JSON: {err.msg}",
            f"{path}, line {err.lineno}",
            "write a JSON list of reply objects, or one object per line",
        ) from None
    return [_entry(path, index, item) for index, item in enumerate(raw)]


def _entry(path: Path, index: int, item: object) -> ScriptedReply:
    where = f"{path}, reply {index}"
    try:
        entry = ScriptedReply.model_validate(item)
    except ValidationError as err:
        first = err.errors()[0]
        location = ".".join(str(part) for part in first["loc"])
        problem = f"{location}: {first['msg']}" if location else first["msg"]
        raise LLMFatalError(
            f"bad reply entry: {problem}", where, "see agents/llm/scripted.py for the format"
        ) from None
    if entry.file is None:
        return entry
    file = entry.file if entry.file.is_absolute() else path.parent / entry.file
    try:
        text = read_user_text(file, "reply file")
    except UserError as err:
        fix = f"{err.fix} (paths in `file` are relative to the script)"
        raise LLMFatalError(err.what, err.where or where, fix) from None
    return entry.model_copy(update={"text": text, "file": None})
