"""The runner's own paths kept out of what a run publishes: error texts, checks and logs name
files by absolute path (``/home/runner/work/models/models/act.py``, a scratch folder
``/tmp/kernelpilot-run-4711-abc/candidate-x/main.cpp``), which says nothing to a reader of the
pull request and tells everyone how the runner is laid out.

``scrubbed`` rewrites every text of the results once, before they are saved (``results.json``,
so the comment, the job summary and ``kernelpilot review``'s output all read the same): a path
in the checkout becomes relative to its root, a scratch folder of the run ``<scratch>``, the
temporary folder ``<tmp>`` and the home folder ``~``. Kernel sources are left as they were
verified: the follow-up ships them byte for byte.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from bot.pr.results import PullResults
from harness.sandbox.lifetime import SCRATCH_PREFIX

KEPT = frozenset({"kernel_source"})  # the verified code: shipped as it is
_BEFORE = r"(?<![\w.~/-])"  # a path starts here, not inside a longer one (/var/tmp)
_AFTER = r"(?![\w.~-])"  # and the prefix ends at a separator (/tmp, not /tmpfoo)


def scrubbed(results: PullResults, root: Path) -> PullResults:
    """``results`` with the runner's paths rewritten in every text but the kernels' sources."""
    scrub = path_scrubber(root)
    data = _walk(results.model_dump(mode="json"), scrub)
    return PullResults.model_validate(data)


def path_scrubber(root: Path) -> Callable[[str], str]:
    """A function that rewrites the runner's paths in a text: ``root`` (the checkout) made
    relative, the run's scratch folders, the temporary folder and home as placeholders. Each
    path is matched as given and as resolved (``/tmp`` may be a link), the longest first."""
    rules: list[tuple[str, str, str]] = []  # (prefix, pattern after it, replacement)
    for path in _forms(root):
        rules += [(path, "/", ""), (path, _AFTER, ".")]
    # The temporary folder here, and /tmp: a sandboxed worker has its own /tmp whatever TMPDIR
    # says outside.
    for path in {*_forms(Path(tempfile.gettempdir())), "/tmp"}:
        rules.append((path, rf"/{re.escape(SCRATCH_PREFIX)}[\w.-]*", "<scratch>"))
        rules.append((path, r"(?=/)|" + _AFTER, "<tmp>"))
    for path in _forms(Path.home()):
        rules.append((path, r"(?=/)|" + _AFTER, "~"))
    # Longer prefixes first: the checkout is often under home or the temporary folder.
    rules.sort(key=lambda rule: -len(rule[0]))
    compiled = [
        (re.compile(_BEFORE + re.escape(prefix) + f"(?:{after})"), replacement)
        for prefix, after, replacement in rules
    ]

    def scrub(text: str) -> str:
        for pattern, replacement in compiled:
            text = pattern.sub(replacement, text)
        return text

    return scrub


def _forms(path: Path) -> list[str]:
    """``path`` as given and resolved; never ``/`` (a home of ``/`` would eat every path)."""
    forms = {str(path.absolute()), os.path.realpath(path)}
    return [form.rstrip("/") for form in forms if form.rstrip("/")]


def _walk(value: object, scrub: Callable[[str], str]) -> object:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, list):
        return [_walk(item, scrub) for item in value]
    if isinstance(value, dict):
        return {key: item if key in KEPT else _walk(item, scrub) for key, item in value.items()}
    return value
