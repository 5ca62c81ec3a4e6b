"""Secrets scrubbed out of text that leaves a worker: logs, error messages, model replies.

Text that pull-request code could write (a worker's log, an input factory's error, a compiler's
echo of a kernel source) goes to the LLM's prompt, the trajectory, the report and the comment.
``scrub`` replaces anything shaped like a credential with ``MARKER``:

- the literal value of every secret-named variable of this process's environment (names that
  ``SECRET_NAME`` matches; values of 8 characters or more), so a key read from
  ``/proc/<pid>/environ`` is caught whatever its shape;
- OpenAI keys (``sk-...``, ``sk-proj-...``), GitHub tokens (``ghp_``, ``gho_``, ``ghu_``,
  ``ghs_``, ``ghr_``, ``github_pat_``), AWS access key ids (``AKIA``/``ASIA``), JWTs,
  ``Bearer`` credentials, PEM private key blocks (also one cut off before its END line);
- assignments to secret-named variables: ``OPENAI_API_KEY=...``, ``"api_key": "..."``.

Every pattern is a single pass without nested quantifiers (linear in the text), and PEM blocks
are found with ``str.find``, so a megabyte log costs milliseconds. Not caught: a secret encoded
(base64, hex, split across lines) by the code that printed it, and secrets of other shapes held
in variables with innocent names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import TypeVar

from pydantic import BaseModel

# A variable whose name says it holds a secret: never passed to a worker, its value scrubbed.
SECRET_NAME = re.compile(r"(TOKEN|KEY|SECRET|PASSWORD|CREDENTIAL|AUTH)", re.IGNORECASE)

MARKER = "[REDACTED]"
MIN_SECRET_VALUE = 8  # shorter values of secret-named variables ("1", "true") are not secrets

_SHAPES = re.compile(
    "|".join(
        (
            r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}",  # OpenAI: sk-..., sk-proj-..., sk-svcacct-
            r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
            r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}",  # GitHub fine-grained tokens
            r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])",  # AWS access key ids
            r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*",
            r"(?i:\bbearer)\s+[A-Za-z0-9\-._~+/]+=*",  # RFC 6750 credentials
        )
    )
)
# NAME=, "NAME":, export NAME = (the name is checked against SECRET_NAME, the value read by hand:
# one pattern for both would backtrack quadratically over a long run of capitals).
_ASSIGNMENT = re.compile(r"\b([A-Za-z][A-Za-z0-9_]*)['\"]?[ \t]*[=:][ \t]*")
_LOWER_SECRET = re.compile(
    r"^(?:api_?key|secret_?key|secret|password|passwd|access_?token|auth_?token|"
    r"refresh_?token|client_?secret|private_?key)$",
    re.IGNORECASE,
)
_VALUE_END = frozenset(" \t\r\n,;)}]")
_PEM_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_PEM_END = "-----END "

Scrubbed = TypeVar("Scrubbed", bound=BaseModel)


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the secret-named variables of ``environ`` (default: this process's),
    longest first."""
    environ = os.environ if environ is None else environ
    values = {
        value
        for name, value in environ.items()
        if SECRET_NAME.search(name) and len(value) >= MIN_SECRET_VALUE
    }
    return sorted(values, key=len, reverse=True)


def scrub(text: str, secrets: Sequence[str] | None = None) -> str:
    """``text`` with every secret-shaped span replaced by ``MARKER`` (module docstring).

    ``secrets``: literal values to remove (default: ``secret_values()``, read now).
    """
    if not text:
        return text
    text = _scrub_pem(text)
    for value in secret_values() if secrets is None else secrets:
        text = text.replace(value, MARKER)
    text = _SHAPES.sub(MARKER, text)
    return _scrub_assignments(text)


def scrub_record(record: Scrubbed) -> Scrubbed:
    """A copy of ``record`` with every string in it scrubbed (nested records, lists, dicts)."""
    return type(record).model_validate(scrub_value(record.model_dump()))


def scrub_value(value: object, secrets: Sequence[str] | None = None) -> object:
    """``value`` with every string in it scrubbed, through dicts, lists and tuples (a worker's
    decoded JSON message, a record's dump)."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return scrub(value, secrets)
    if isinstance(value, dict):
        return {key: scrub_value(item, secrets) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(scrub_value(item, secrets) for item in value)
    return value


def _scrub_assignments(text: str) -> str:
    """The values assigned to secret names: ``GH_TOKEN=...`` (an environment-style name, any
    value) and ``api_key = "..."`` (a lowercase name, a quoted value only, so that a compiler's
    echo of ``key = cache.get(x)`` stays readable)."""
    out: list[str] = []
    position = 0
    for match in _ASSIGNMENT.finditer(text):
        if match.start() < position:
            continue  # inside a value already replaced
        name, start = match.group(1), match.end()
        quoted = start < len(text) and text[start] in "\"'"
        if name.isupper() and SECRET_NAME.search(name):
            end = _value_end(text, start, quoted)
        elif quoted and _LOWER_SECRET.match(name):
            end = _value_end(text, start, quoted)
        else:
            continue
        if end > start:
            out.append(text[position:start] + MARKER)
            position = end
    out.append(text[position:])
    return "".join(out)


def _value_end(text: str, start: int, quoted: bool) -> int:
    """Where the value starting at ``start`` ends: its closing quote, or a delimiter."""
    if quoted:
        close = text.find(text[start], start + 1)
        newline = text.find("\n", start + 1)
        if close < 0 or (0 <= newline < close):
            return newline if newline >= 0 else len(text)
        return close + 1
    end = start
    while end < len(text) and text[end] not in _VALUE_END:
        end += 1
    return end


def _scrub_pem(text: str) -> str:
    """PEM private key blocks, from BEGIN to END (or to the end of a text cut short)."""
    out: list[str] = []
    position = 0
    while match := _PEM_BEGIN.search(text, position):
        out.append(text[position : match.start()] + MARKER)
        end = text.find(_PEM_END, match.end())
        if end < 0:
            return "".join(out)
        close = text.find("-----", end + len(_PEM_END))
        position = len(text) if close < 0 else close + len("-----")
    out.append(text[position:])
    return "".join(out)
