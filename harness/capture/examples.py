"""The repository's own usage examples as capture code: the Python blocks of its Markdown files.

A library without tests for a module often shows it in its README (``v = ViT(...); preds =
v(img)``): running that example builds and calls the module as the authors meant it. The
blocks of one Markdown file run in order in one namespace, as a reader runs them, up to the
last block that names a changed class; a block that fails is said and the next one runs.
Doctest-style blocks (``>>>`` and ``...`` prompts) run their statements.

The parent picks the blocks (text only: nothing of them runs there); the capture worker, in the
sandbox, runs them with each block's lines at their place in the file, so that where a module
was built reads ``README.md:72``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict, Field

PYTHON_INFO = {"python", "py", "python3", "pycon", "ipython"}
MAX_EXAMPLES = 64  # blocks handed to one capture
MAX_EXAMPLE_CHARS = 20_000
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")


class Example(BaseModel):
    """One Python block of a Markdown file: where it starts and its code."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="The Markdown file, relative to the repository root.")
    line: int = Field(ge=1, description="The line of the block's first code line.")
    code: str = Field(max_length=MAX_EXAMPLE_CHARS)

    def runnable(self) -> str:
        """The block as Python, at its own lines of the file (for tracebacks and built_at)."""
        return "\n" * (self.line - 1) + _without_prompts(self.code)


def python_blocks(path: str, text: str) -> list[Example]:
    """The fenced Python blocks of a Markdown text, in order (unclosed fences run to the end,
    as CommonMark reads them; blocks over MAX_EXAMPLE_CHARS are left out)."""
    blocks: list[Example] = []
    lines = text.splitlines()
    position = 0
    while position < len(lines):
        opened = _FENCE.match(lines[position])
        if opened is None:
            position += 1
            continue
        fence, info = opened["fence"], opened["info"].lower().strip("{}.")
        start = position + 1
        end = start
        while end < len(lines) and not _closes(lines[end], fence):
            end += 1
        code = "\n".join(lines[start:end])
        if info in PYTHON_INFO and code.strip() and len(code) <= MAX_EXAMPLE_CHARS:
            blocks.append(Example(path=path, line=start + 1, code=code))
        position = end + 1
    return blocks


def examples_naming(files: Iterable[tuple[str, str]], names: set[str]) -> list[Example]:
    """Per Markdown file (path, text), its Python blocks up to the last one that names one of
    ``names`` as a whole word; at most MAX_EXAMPLES blocks in all, files in the order given."""
    wanted = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(names))) + r")\b")
    chosen: list[Example] = []
    for path, text in files:
        blocks = python_blocks(path, text)
        last = max((i for i, block in enumerate(blocks) if wanted.search(block.code)), default=-1)
        chosen += blocks[: last + 1]
        if len(chosen) >= MAX_EXAMPLES:
            return chosen[:MAX_EXAMPLES]
    return chosen


def _closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}


def _without_prompts(code: str) -> str:
    """A doctest-style block's statements (``>>> `` and ``... `` lines; output lines blank);
    any other block as it is."""
    lines = code.splitlines()
    if not any(line.lstrip().startswith(">>>") for line in lines):
        return code
    kept = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith((">>> ", "... ")) or stripped in (">>>", "..."):
            kept.append(stripped[4:])
        else:
            kept.append("")  # an output line: kept as a blank, so line numbers hold
    return "\n".join(kept)
