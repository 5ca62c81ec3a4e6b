"""Writing to a GitHub Actions job: step outputs, the job summary, and logs that cannot issue
workflow commands.

Outputs use the documented multi-line form (``name<<DELIMITER``) with a random delimiter, so a
value (a URL, a speedup, text from a pull request) can never end early and set another output.
Untrusted text is printed between ``::stop-commands::TOKEN`` and ``::TOKEN::``: GitHub ignores
workflow commands (``::set-env``, ``::add-mask``, ...) in between. Workflow commands are printed
only inside GitHub Actions (GITHUB_ACTIONS=true, which the runner sets for every step): in a
terminal they would be noise, and no runner reads them there.
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

# GitHub's limit on one step's summary; a longer one is not shown.
SUMMARY_LIMIT = 1024 * 1024


def set_outputs(output_file: Path | None, values: Mapping[str, object]) -> None:
    """Append step outputs to GITHUB_OUTPUT (nothing outside Actions)."""
    if output_file is None:
        return
    with output_file.open("a", encoding="utf-8") as out:
        for name, value in values.items():
            text = "" if value is None else str(value)
            delimiter = f"kernelpilot_{secrets.token_hex(16)}"
            while delimiter in text:  # pragma: no cover - 128 random bits
                delimiter = f"kernelpilot_{secrets.token_hex(16)}"
            out.write(f"{name}<<{delimiter}\n{text}\n{delimiter}\n")


def add_summary(summary_file: Path | None, markdown: str) -> None:
    """Append markdown to the job summary (GITHUB_STEP_SUMMARY), within GitHub's size limit."""
    if summary_file is None:
        return
    if len(markdown.encode()) > SUMMARY_LIMIT:
        markdown = markdown.encode()[: SUMMARY_LIMIT - 200].decode(errors="ignore")
        markdown += "\n\n_(summary cut at GitHub's 1 MiB limit; the full report is an artifact)_\n"
    with summary_file.open("a", encoding="utf-8") as out:
        out.write(markdown + "\n")


@contextmanager
def commands_stopped(*streams: TextIO, environ: Mapping[str, str] | None = None) -> Iterator[None]:
    """Everything printed inside is plain text to the Actions runner, never a command.

    The markers go to stdout and stderr both (default): the runner reads the two streams
    separately, and a marker on one alone could be read after a line on the other. Outside
    Actions nothing is printed.
    """
    if not in_actions(environ):
        yield
        return
    outs = streams or (sys.stdout, sys.stderr)
    token = secrets.token_hex(16)
    for out in outs:
        out.write(f"::stop-commands::{token}\n")
        out.flush()
    try:
        yield
    finally:
        for out in outs:
            out.flush()
            out.write(f"::{token}::\n")
            out.flush()


def in_actions(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this runs as a GitHub Actions step, whose runner reads workflow commands."""
    return (os.environ if environ is None else environ).get("GITHUB_ACTIONS") == "true"
