"""Kernel sources read as the C++ preprocessor reads them, once, in linear time.

The native gate's rules run on what this produces, never on the raw text: the phases of
translation that change what a line means (line splicing, digraphs) are applied first, comments
are dropped, and string literals (raw ones included) become single tokens, so no spelling hides
code in a comment or a comment in code. What compilers disagree on (trigraphs, a backslash
followed by spaces at the end of a line) and what the gate cannot read (an unterminated comment
or literal, stray backslashes, non-ASCII characters outside comments and literals) is refused.

Every step either consumes input or stops: one pass of one regular expression whose
alternatives match without backtracking over their own text, and ``str.find`` for the ends of
block comments and raw strings. The cost is linear in the source's length, whatever it holds.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import NamedTuple

# A source past this size is refused before it is read (a kernel is a few kilobytes).
MAX_SOURCE_CHARS = 1_000_000

TRIGRAPH = re.compile(r"\?\?[=/'()!<>\-]")
SPACE_AFTER_BACKSLASH = re.compile(r"\\[ \t\f\v]+\n")
_PREFIX = r"(?:u8|[uUL])?"
_DELIM = r"[^ ()\\\t\v\f\n\"]{0,16}"
# One token after optional blanks. Each alternative consumes its own text without going back
# over it; the "bad_" ones catch what the full form could not close, so a failed scan to the end
# of the source happens once, and the lexer stops there.
TOKEN = re.compile(
    r"[ \t\f\v]*(?:"
    r"(?P<nl>\n)"
    r"|(?P<comment>//[^\n]*|/\*(?:[^*]|\*+[^*/])*\*+/)"
    r"|(?P<bad_comment>/\*)"
    rf"|(?P<raw>{_PREFIX}R\"(?P<delim>{_DELIM})\((?s:.*?)\)(?P=delim)\")"
    rf"|(?P<bad_raw>{_PREFIX}R\"{_DELIM}\()"
    rf"|(?P<str>{_PREFIX}\"(?:[^\"\\\n]|\\.)*\")"
    rf"|(?P<bad_str>{_PREFIX}\")"
    rf"|(?P<chr>{_PREFIX}'(?:[^'\\\n]|\\.)*')"
    rf"|(?P<bad_chr>{_PREFIX}')"
    r"|(?P<num>\.?[0-9](?:[eEpP][+-]|'[0-9A-Za-z_]|[0-9A-Za-z_.])*)"
    r"|(?P<id>[A-Za-z_$][A-Za-z0-9_$]*)"
    r"|(?P<punct>%:%:|%:|<:|:>|<%|%>|::|##|\.\.\.|->|[!#-&(-/:-@\[\]^`{-~])"
    r")"
)
BAD = {
    "bad_comment": "an unterminated /* comment",
    "bad_raw": "an unterminated raw string literal",
    "bad_str": "an unterminated string literal",
    "bad_chr": "an unterminated character literal",
}
DIGRAPHS = {"%:%:": "##", "%:": "#", "<:": "[", ":>": "]", "<%": "{", "%>": "}"}
# Directives whose operand is a header name, read before macro expansion.
HEADER_DIRECTIVES = {"include", "include_next", "import", "embed", "__include_macros"}
MESSAGE_DIRECTIVES = {"error", "warning"}
CONDITIONALS = {"if", "ifdef", "ifndef", "elif", "elifdef", "elifndef", "else", "endif"}
HEADER_NAME = re.compile(r"[ \t\f\v]*(?:<(?P<angle>[^>\n]*)>|\"(?P<quote>[^\"\n]*)\")")


class UnreadableSource(Exception):
    """The source cannot be read as C++ the way every compiler reads it."""


class Token(NamedTuple):
    kind: str  # id, num, str, chr, punct, cond (a conditional directive in the code)
    text: str
    line: int


@dataclass(frozen=True)
class Include:
    directive: str
    header: str  # the name between <> or "", or "" when the operand is not a header name
    angled: bool
    line: int


@dataclass
class Macro:
    name: str
    function_like: bool
    body: list[Token]
    line: int


@dataclass
class Lexed:
    """The source's tokens: ``code`` outside directives; directives' parts on their own."""

    code: list[Token] = field(default_factory=list)
    includes: list[Include] = field(default_factory=list)
    pragmas: list[tuple[list[Token], int]] = field(default_factory=list)
    macros: list[Macro] = field(default_factory=list)
    directives: list[tuple[str, int]] = field(default_factory=list)
    # Every token, directives' included: what name rules look at.
    all_tokens: list[Token] = field(default_factory=list)


def lex(source: str) -> Lexed:
    """``source`` as tokens; raises UnreadableSource for what the gate cannot read."""
    if len(source) > MAX_SOURCE_CHARS:
        raise UnreadableSource(
            f"the kernel source is {len(source):,} characters; the gate reads at most "
            f"{MAX_SOURCE_CHARS:,} (split it, or generate less code)"
        )
    text, line_of = _spliced(source)
    return _Lexer(text, line_of).run()


def _spliced(source: str):
    """Phases 1-2: line endings made ``\\n``, trigraphs refused, lines spliced."""
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    found = TRIGRAPH.search(text)
    if found:
        raise UnreadableSource(
            f"trigraph {found.group(0)!r} at line {text.count(chr(10), 0, found.start()) + 1}: "
            "compilers replace it or not depending on -std, so the gate refuses it"
        )
    found = SPACE_AFTER_BACKSLASH.search(text)
    if found:
        raise UnreadableSource(
            f"a backslash followed by spaces ends line {text.count(chr(10), 0, found.start()) + 1}:"
            " compilers disagree on whether it joins the lines; remove the spaces"
        )
    # Where each splice was, in the spliced text's coordinates; and the original's newlines.
    splices = [m.start() - 2 * i for i, m in enumerate(re.finditer(r"\\\n", text))]
    newlines = [m.start() for m in re.finditer(r"\n", text)]
    joined = text.replace("\\\n", "")

    def line_of(position: int) -> int:
        original = position + 2 * bisect.bisect_right(splices, position)
        return bisect.bisect_left(newlines, original) + 1

    return joined, line_of


class _Lexer:
    """One pass over the spliced text; directives read to the end of their line."""

    def __init__(self, text: str, line_of) -> None:
        self.text = text
        self.line_of = line_of
        self.out = Lexed()
        self.pos = 0

    def take(self) -> tuple[str, str, int] | None:
        """The next token as (kind, text, start), blanks skipped; None at the end."""
        text, pos = self.text, self.pos
        match = TOKEN.match(text, pos)
        if match is None:
            rest = text[pos:].lstrip(" \t\f\v")
            if not rest:
                self.pos = len(text)
                return None
            at = len(text) - len(rest)
            what = "a stray backslash" if rest[0] == "\\" else f"the character {rest[0]!r}"
            raise self.fail(f"{what} outside a comment or literal (the gate reads ASCII code)", at)
        kind = match.lastgroup or ""
        if kind == "delim":
            kind = "raw"
        start, end = match.start(kind), match.end()
        if kind in BAD:
            raise self.fail(BAD[kind], start)
        value = match.group(kind)
        if kind == "punct" and value in DIGRAPHS:
            if value == "<:" and text[end : end + 1] == ":" and text[end + 1 : end + 2] not in ":>":
                value, end = "<", start + 1  # C++11: "<::" is "<" then "::"
            else:
                value = DIGRAPHS[value]
        self.pos = end
        return ("str" if kind == "raw" else kind), value, start

    def fail(self, what: str, position: int) -> UnreadableSource:
        return UnreadableSource(f"{what} at line {self.line_of(position)}")

    def run(self) -> Lexed:
        code, every, line_of = self.out.code, self.out.all_tokens, self.line_of
        line_start = True
        while (token := self.take()) is not None:
            kind, value, start = token
            if kind == "nl":
                line_start = True
            elif kind == "comment":
                continue
            elif line_start and value == "#" and kind == "punct":
                self.directive(line_of(start))
            else:
                line_start = False
                token_ = Token(kind, value, line_of(start))
                code.append(token_)
                every.append(token_)
        return self.out

    def line_tokens(self) -> list[Token]:
        """The rest of the directive's line, as tokens; the newline is left for run()."""
        tokens = []
        while (token := self.peek()) is not None and token[0] != "nl":
            self.take()
            tokens.append(Token(token[0], token[1], self.line_of(token[2])))
        return tokens

    def peek(self) -> tuple[str, str, int] | None:
        """The next token that is not a comment, without taking it."""
        while True:
            saved = self.pos
            token = self.take()
            if token is None or token[0] != "comment":
                self.pos = saved
                return token

    def directive(self, line: int) -> None:
        token = self.peek()
        if token is None or token[0] == "nl":
            return  # the null directive
        self.take()
        kind, name, _ = token
        self.out.directives.append((name, line))
        self.out.all_tokens.append(Token(kind, name, line))
        if name in HEADER_DIRECTIVES:
            self.header(name, line)
        elif name in MESSAGE_DIRECTIVES:
            newline = self.text.find("\n", self.pos)
            self.pos = len(self.text) if newline < 0 else newline
        elif name == "define" and (macro := self.peek()) is not None and macro[0] == "id":
            self.take()
            function_like = self.text.startswith("(", self.pos)
            rest = self.line_tokens()
            self.out.all_tokens.append(Token("id", macro[1], line))
            self.out.all_tokens.extend(rest)
            if function_like:  # the body follows the parameter list
                close = next((i for i, t in enumerate(rest) if t.text == ")"), len(rest) - 1)
                rest = rest[close + 1 :]
            self.out.macros.append(Macro(macro[1], function_like, rest, line))
        else:
            rest = self.line_tokens()
            self.out.all_tokens.extend(rest)
            if name == "pragma":
                self.out.pragmas.append((rest, line))
            elif name in CONDITIONALS:
                self.out.code.append(Token("cond", name, line))

    def header(self, name: str, line: int) -> None:
        self.peek()
        match = HEADER_NAME.match(self.text, self.pos)
        if match is None:
            self.out.includes.append(Include(name, "", False, line))
            self.out.all_tokens.extend(self.line_tokens())
            return
        self.pos = match.end()
        angled = match.group("angle") is not None
        header = match.group("angle") if angled else match.group("quote")
        self.out.includes.append(Include(name, header, angled, line))
        if self.line_tokens():
            raise UnreadableSource(f"text after the header name of #{name} at line {line}")
