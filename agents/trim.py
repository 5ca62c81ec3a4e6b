"""Texts trimmed to a token budget: the estimate, code kept at its head and tail, logs at their
first error and tail.

Tokens are estimated as ``ceil(len(text) / 4)``: about four characters per token for code and
English in BPE tokenizers, and no tokenizer to install for an endpoint whose model is unknown.

Trimming rules (``trim_code``, ``trim_log``): whole lines only, head and tail for code, the
first error and the tail for logs, and a marker line where lines were cut that says how many.
A single line longer than ``MAX_LINE_CHARS`` is the one exception: it keeps its start and says
how many characters it lost.
"""

from __future__ import annotations

import re

from agents.templates import render

CHARS_PER_TOKEN = 4
MAX_LINE_CHARS = 2000
# A line that starts what a compiler, the gate or Python reports as the problem.
ERROR_LINE = re.compile(
    r"\berror\b|\bexception\b|traceback|\bfail(ed|ure|s)?\b|\brejected\b|undefined reference|"
    r"^line \d+:|mismatch|not allowed|refused|(?-i:\b[A-Z]\w*(Error|Exception)\b)",
    re.IGNORECASE | re.MULTILINE,
)


def estimate_tokens(text: str) -> int:
    """``ceil(len(text) / 4)``: see the module docstring for why not a tokenizer."""
    return -(-len(text) // CHARS_PER_TOKEN)


def trim_code(text: str, max_tokens: int) -> str:
    """``text`` within ``max_tokens``: whole lines from the head (2/3) and the tail (1/3)."""
    if estimate_tokens(text) <= max_tokens:
        return text
    lines = _short_lines(text.splitlines(), max_tokens)
    budget = max_tokens * CHARS_PER_TOKEN - _marker_reserve()
    head = _take(lines, range(len(lines)), budget * 2 // 3)
    tail = _take(lines, range(len(lines) - 1, -1, -1), budget - _cost(lines, head), head)
    return _join(lines, head | tail)


def trim_log(text: str, max_tokens: int) -> str:
    """``text`` within ``max_tokens``: the first error and what follows it, then the tail.

    The first error is where a build log or a traceback says what went wrong first (later
    errors often follow from it); the tail is where the final verdict is.
    """
    if estimate_tokens(text) <= max_tokens:
        return text
    lines = _short_lines(text.splitlines(), max_tokens)
    budget = max_tokens * CHARS_PER_TOKEN - 2 * _marker_reserve()
    first = next((i for i, line in enumerate(lines) if ERROR_LINE.search(line)), None)
    kept: set[int] = set()
    if first is not None:
        start = max(0, first - 2)
        kept = _take(lines, range(start, len(lines)), int(budget * 0.4))
    kept |= _take(lines, range(len(lines) - 1, -1, -1), budget - _cost(lines, kept), kept)
    return _join(lines, kept)


def _take(lines: list[str], order: range, budget: int, taken: set[int] | None = None) -> set[int]:
    """Indices of lines taken in ``order`` until ``budget`` characters are spent."""
    taken = taken or set()
    chosen: set[int] = set()
    spent = 0
    for index in order:
        if index in taken:
            break
        spent += len(lines[index]) + 1
        if spent > budget:
            break
        chosen.add(index)
    return chosen


def _cost(lines: list[str], kept: set[int]) -> int:
    return sum(len(lines[index]) + 1 for index in kept)


def _join(lines: list[str], kept: set[int]) -> str:
    """The kept lines in order, with a marker line for every run of lines cut."""
    out: list[str] = []
    gap: list[str] = []
    for index, line in enumerate(lines):
        if index in kept:
            if gap:
                out.append(_marker(gap))
                gap = []
            out.append(line)
        else:
            gap.append(line)
    if gap:
        out.append(_marker(gap))
    return "\n".join(out)


def _marker(cut: list[str]) -> str:
    chars = sum(len(line) + 1 for line in cut)
    return render("cut_lines", {"lines": str(len(cut)), "chars": str(chars)}).strip()


def _marker_reserve() -> int:
    return len(_marker(["x" * 9_999_999] * 999_999)) + 1


def _short_lines(lines: list[str], max_tokens: int) -> list[str]:
    """Lines over ``MAX_LINE_CHARS`` (or half the budget) keep their start and say what went."""
    limit = max(80, min(MAX_LINE_CHARS, max_tokens * CHARS_PER_TOKEN // 2))
    return [
        line
        if len(line) <= limit
        else line[:limit] + " " + render("cut_line", {"chars": str(len(line) - limit)}).strip()
        for line in lines
    ]
