"""The one renderer of untrusted text into GitHub markdown: every comment, review comment,
follow-up pull request (title and body) and issue kernelpilot writes puts what it did not write
itself through these functions.

What came from a pull request's job (paths, class names, device names, error texts, checks,
plans, kernel sources) is data. GitHub would otherwise turn it into links, images, @-mentions
of users and teams (which notify them), cross-references (``#12``, ``owner/repo#12``: an entry
in another issue's timeline), raw HTML, autolinked URLs, table cells and code blocks of its own.
So:

- ``code``: a code span, one line: inside it GitHub makes no link, image, mention, reference,
  HTML or emphasis; its backtick fence is longer than any run inside. ``in_table``: pipes and
  backslashes escaped, so that no text can split a table cell (GFM splits cells before it reads
  code spans).
- ``plain``: prose, one line: every character that starts markdown backslash-escaped,
  and a zero-width space after each ``@`` and ``#`` and inside ``://`` and ``www.`` (GitHub finds
  mentions, references and URLs in the rendered text, where escapes are gone).
- ``html``: text inside raw HTML (a ``<summary>``): entities, and the same zero-width spaces.
- ``fenced``: a code block whose fence is longer than any backtick run inside, so that no line
  of it can close the block.
- ``capped``: text cut to a size, saying so (GitHub refuses a comment or body over 65,536).

Control characters (but newlines and tabs in fenced blocks) and bidirectional overrides are
removed everywhere: they would make the text read differently from what it is.
"""

from __future__ import annotations

import math
import re

BODY_LIMIT = 65_536  # GitHub's limit on a comment, a review comment, an issue or PR body
TITLE_LIMIT = 256
CUT = "…"
ZWSP = "\u200b"

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
# What starts markdown inside a line: escapes, code, emphasis, links and images, HTML and
# entities, table cells, strikethrough, headings, math. A backslash before any of them is
# CommonMark's literal character.
_PUNCTUATION = re.compile(r"([\\`*_\[\]<>()!&|~#$])")
_LINKABLE = re.compile(r"([@#])|(:)(?=//)|(www)(?=\.)", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")


def clean(text: str) -> str:
    """Control characters and direction overrides removed; line ends made ``\\n``."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def one_line(text: str, limit: int) -> str:
    """Whitespace runs as one space, cut to ``limit`` characters with an ellipsis."""
    text = " ".join(clean(text).split())
    return text if len(text) <= limit else text[: max(0, limit - 1)] + CUT


def _unlinked(text: str) -> str:
    """A zero-width space where GitHub would start a mention, reference or URL."""
    return _LINKABLE.sub(lambda m: (m.group(0)) + ZWSP, text)


def plain(text: str, limit: int = 2000) -> str:
    """Untrusted prose on one line: no markdown, HTML, mention, reference or link survives."""
    return _PUNCTUATION.sub(r"\\\1", _unlinked(one_line(text, limit)))


def code(text: str, limit: int = 200, in_table: bool = False) -> str:
    """Untrusted text as a code span on one line; empty text gives an empty string."""
    text = one_line(text, limit)
    if not text:
        return ""
    if in_table:
        text = text.replace("\\", "\\\\").replace("|", "\\|")
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def html(text: str, limit: int = 200) -> str:
    """Untrusted text inside raw HTML, on one line."""
    text = one_line(text, limit)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = text.replace('"', "&quot;").replace("'", "&#39;")
    return _unlinked(text.replace("[", "&#91;").replace("]", "&#93;"))


def fenced(text: str, language: str = "text", limit: int = 20_000, indent: str = "") -> list[str]:
    """Untrusted text as a fenced code block (its lines, then an empty one). ``language`` is
    kernelpilot's own word (``python``, ``text``, ``diff``, ``toml``), never the text's."""
    if not re.fullmatch(r"[a-z]*", language):
        raise ValueError(f"not a language name: {language!r}")
    text = clean(text).rstrip("\n")
    note = []
    if len(text) > limit:
        text = text[:limit]
        note = [f"{indent}_({len(text):,} characters shown, the rest cut)_", ""]
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = [indent + line for line in text.split("\n")]
    return [f"{indent}{fence}{language}", *body, f"{indent}{fence}", "", *note]


def number(value: float | None, spec: str, suffix: str = "") -> str:
    """A number kernelpilot formats itself; "-" for none. Non-finite numbers never get here
    (``bot.pr.results`` refuses them), so one is a bug."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        raise ValueError(f"a non-finite number reached the renderer: {value!r}")
    return f"{value:{spec}}{suffix}"


def capped(text: str, limit: int = BODY_LIMIT, where: str = "the run's artifacts") -> str:
    """``text`` if it fits in ``limit`` characters, else its start and a line saying it was cut
    and where the rest is. An open fenced block is closed first, so the note reads as text."""
    if len(text) <= limit:
        return text
    note = f"\n\n_(cut at {limit:,} characters, GitHub's limit: the rest is in {where})_\n"
    cut = text[: limit - len(note) - 40]
    fence = _open_fence(cut)
    closing = f"\n{fence}" if fence else ""
    return cut + closing + note


def _open_fence(text: str) -> str:
    """The fence of a code block left open at the end of ``text``, or ""."""
    open_fence = ""
    for line in text.split("\n"):
        stripped = line.strip()
        match = re.match(r"(`{3,})", stripped)
        if not match:
            continue
        if not open_fence:
            open_fence = match.group(1)
        elif stripped == open_fence or set(stripped) == {"`"} and len(stripped) >= len(open_fence):
            open_fence = ""
    return open_fence
