"""A comment made to fit under GitHub's size limit by leaving out whole pieces, never by cutting
text: a cut made anywhere could leave a code fence or a ``<details>`` open, and everything after
it would render as code or stay folded.

Each piece of the comment is well-formed markdown on its own (its fences and ``<details>`` closed
inside it) and comes in versions, fullest first. A shorter version names the stage at which it
replaces the one before and what it leaves out (``"kernel source"``). ``fit`` takes the stages in
order, later pieces before earlier ones within a stage, until the whole fits; the left-out
counts go to a note (kernelpilot's own words, inserted before the last piece) that says what is
missing and where it is.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

Noun = tuple[str, str]  # what a version leaves out: singular and plural, as the note says it


class Stage(IntEnum):
    """The comment's order of leaving out, first to last: what is elsewhere goes first (the
    kernels are in the follow-up and the artifacts), what the reader acts on goes last."""

    sources = 1  # the offered kernels' sources, a fork's patch
    plans = 2  # plans and check lists
    other_details = 3  # the sections of modules without an offered kernel
    long_lists = 4  # lists cut to their first entries
    offered_details = 5  # the sections of modules with an offered kernel
    lists = 6  # the lists, and the lines on kernels not offered
    rows = 7  # the table's rows, last first


def size(text: str) -> int:
    """Characters as GitHub may count them: UTF-16 code units (an emoji outside the basic plane
    is two), never fewer than Python's ``len``."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class Version:
    lines: list[str]
    stage: int = 0  # when this version replaces the one before it (0: the fullest)
    left_out: tuple[Noun, ...] = ()  # what it lacks against the fullest, one noun per thing

    @property
    def size(self) -> int:
        return sum(size(line) + 1 for line in self.lines)  # each line ends in "\n"


@dataclass(frozen=True)
class Piece:
    versions: list[Version]

    @classmethod
    def fixed(cls, lines: list[str]) -> Piece:
        """A piece that is never shortened (the headline, the table's header, the footer)."""
        return cls([Version(lines)])

    @classmethod
    def shortened(cls, versions: list[Version]) -> Piece:
        """The versions with those that change nothing left out (no plan to drop: no step)."""
        kept = versions[:1]
        for version in versions[1:]:
            if version.lines != kept[-1].lines:
                kept.append(version)
        return cls(kept)


def fit(pieces: list[Piece], limit: int, note: Callable[[Counter[Noun]], list[str]]) -> str:
    """The pieces as one comment of at most ``limit`` characters, and ``note(left_out)``
    (nothing when nothing is left out) inserted before the last piece. Pieces are shortened
    stage by stage until the whole fits; then, since one large piece may have freed room for
    others, what was shortened is given back, most important first, wherever it still fits.
    Fixed pieces alone over the limit are kernelpilot's bug: it raises."""
    steps = sorted(
        (version.stage, -position, index)
        for position, piece in enumerate(pieces)
        for index, version in enumerate(piece.versions)
        if index > 0
    )
    choice = _Choice(pieces, note)
    undo: list[tuple[int, int]] = []  # (position, its version before), in the order shortened
    for _stage, negative_position, index in steps:
        if choice.size() <= limit:
            break
        position = -negative_position
        if index > choice.chosen[position]:
            undo.append((position, choice.chosen[position]))
            choice.take(position, index)
    if choice.size() > limit:
        raise ValueError(f"the comment's fixed parts alone are over {limit:,} characters")
    for position, before in reversed(undo):
        shorter = choice.chosen[position]
        choice.take(position, before)
        if choice.size() > limit:
            choice.take(position, shorter)
    return choice.text()


class _Choice:
    """A version chosen for each piece, with the running size and left-out counts."""

    def __init__(self, pieces: list[Piece], note: Callable[[Counter[Noun]], list[str]]) -> None:
        self.pieces, self.note = pieces, note
        self.chosen = [0] * len(pieces)
        self.total = sum(piece.versions[0].size for piece in pieces)
        self.left_out: Counter[Noun] = Counter()

    def take(self, position: int, index: int) -> None:
        old = self.pieces[position].versions[self.chosen[position]]
        new = self.pieces[position].versions[index]
        self.total += new.size - old.size
        self.left_out.subtract(old.left_out)
        self.left_out.update(new.left_out)
        self.chosen[position] = index

    def noted(self) -> list[str]:
        left_out = +self.left_out  # without the zero counts
        return self.note(left_out) if left_out else []

    def size(self) -> int:
        return self.total + sum(size(line) + 1 for line in self.noted())

    def text(self) -> str:
        versions = [piece.versions[i] for piece, i in zip(self.pieces, self.chosen, strict=True)]
        lines = [line for version in versions[:-1] for line in version.lines]
        lines += self.noted() + (versions[-1].lines if versions else [])
        return "".join(line + "\n" for line in lines)
