"""Text that is not kernelpilot's own, framed as data before it goes into a prompt.

Everything a role is shown besides the templates' own words can carry text the pull request's
author chose: the reference module's source and docstrings, candidates written by a model that
read them, the harness's verdicts and logs (which quote the user's errors and the compiler's
echo of a kernel source), profiler op names, other models' replies. ``data_block`` puts such a
text, scrubbed of secrets (``harness.sandbox.redact``), inside a block that ``prompts/data_rule.md``
tells the model to read as data, never as instructions.

The block cannot be closed from inside. Its opening and closing lines carry an id of 64 bits
keyed by a secret drawn once per run (``secrets``) and by the text itself (HMAC-SHA-256), and
an id that occurs anywhere in the text is drawn again: the text would have to contain the
closing line before the id was chosen, and no one who wrote it knows the key. The same text
gets the same id throughout a run, so a prompt that shows it again keeps the same bytes: a
provider's prompt cache reuses everything up to the first text that changed. The markdown
fence inside the block is longer than any run of backticks in the text, so the text cannot end
the code block either.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from agents.templates import render
from harness.sandbox.redact import scrub

ID_BYTES = 8
_BACKTICKS = re.compile(r"`{3,}")
_RUN_KEY = secrets.token_bytes(32)  # drawn once per process: ids never repeat across runs


def new_id(text: str, draw: int) -> str:
    """The block id of ``text`` at its ``draw``-th try: 16 hex digits, keyed by the run's
    secret, the same for the same text and draw throughout the run."""
    message = draw.to_bytes(4, "big") + text.encode()
    return hmac.new(_RUN_KEY, message, hashlib.sha256).hexdigest()[: 2 * ID_BYTES]


def data_block(text: str, kind: str, language: str = "text") -> str:
    """``text``, scrubbed, as a data block (``prompts/data.md``) labelled ``kind``.

    ``kind`` is kernelpilot's own label ("the reference module's source").
    """
    text = scrub(text.strip("\n"))
    draw = 0
    block_id = new_id(text, draw)
    while block_id in text:  # the text holds this id (a guess, or an id it was shown)
        draw += 1
        block_id = new_id(text, draw)
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=2)
    values = {
        "id": block_id,
        "kind": kind,
        "fence": "`" * max(3, longest + 1),
        "language": language,
        "text": text,
    }
    return render("data", values).strip("\n")


def data_rule() -> str:
    """What every role is told about data blocks (``prompts/data_rule.md``)."""
    return render("data_rule", {}).strip()
