"""The comment's pieces around the targets: the changed modules kernelpilot could not take, a
fork's kernel files as a patch, and the configuration that judged the run.

Each list comes whole, then cut to its first entries with a line saying how many more there
are and where, then gone (``bot.pr.fit`` picks the version that fits). Entries are rendered the
same whatever their kind (a skipped file's reason is the detector's own sentence).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from bot import markdown as md
from bot.detect.changes import ChangedModule, ChangeReport
from bot.pr.base_config import JudgingConfig
from bot.pr.fit import Noun, Piece, Stage, Version
from bot.pr.followup import Followup, as_patch

UNCONFIGURED: Noun = ("module without inputs", "modules without inputs")
USERS: Noun = ("module that uses a changed one", "modules that use a changed one")
COSMETIC: Noun = ("cosmetic change", "cosmetic changes")
CAPTURED: Noun = ("captured target", "captured targets")
GUESSED: Noun = ("guessed target", "guessed targets")
SKIPPED: Noun = ("file not looked at", "files not looked at")
OVER_CAP: Noun = ("module over the cap", "modules over the cap")
REFUSED: Noun = ("refused setting", "refused settings")
PATCH: Noun = ("patch of the kernel files", "patches of the kernel files")
SHORT_LIST = 10  # entries a list is cut to before it goes
Entry = TypeVar("Entry")


def changes(changes: ChangeReport, rest_at: str) -> list[Piece]:
    unconfigured = [m for m in changes.unconfigured() if m.relation != "user"]
    users = [m for m in changes.unconfigured() if m.relation == "user"]
    cosmetic = [f.path for f in changes.skipped_files if f.kind == "cosmetic"]
    cosmetic += [m.key for m in changes.cosmetic]
    captured = [module for module in changes.modules if module.target_source == "capture"]
    guessed = [module for module in changes.modules if module.target_source == "guess"]
    return [
        _listed(
            captured,
            [
                "",
                "**Targets captured from the repository's own code** (no configuration needed; "
                "`kernelpilot targets --write` freezes them into `pyproject.toml`):",
            ],
            _noted,
            CAPTURED,
            rest_at,
        ),
        _listed(
            guessed,
            [
                "",
                "**Targets guessed**: nothing in the repository calls them, so kernelpilot called "
                "them at small sizes of its own (built from their constructors' signatures where "
                "nothing built them either). Check the sizes (`kernelpilot targets --write` freezes them into "
                "`pyproject.toml` to edit), or name a command in `[tool.kernelpilot.capture]`:",
            ],
            _noted,
            GUESSED,
            rest_at,
        ),
        _listed(
            unconfigured,
            [
                "",
                "**Changed modules kernelpilot cannot build inputs for.** Name a command that "
                'builds and runs them (`[tool.kernelpilot] capture = "python script.py"`), or '
                "add to the `pyproject.toml` named (and write the functions it names):",
            ],
            _unconfigured,
            UNCONFIGURED,
            rest_at,
        ),
        _named(
            [m.key for m in users],
            "**Modules that use a changed module**, without inputs (a "
            "`[[tool.kernelpilot.targets]]` entry for one optimizes it too):",
            USERS,
            rest_at,
        ),
        _named(
            cosmetic,
            "**Changed only in comments, docstrings or formatting**, so not optimized:",
            COSMETIC,
            rest_at,
        ),
        _listed(
            [f for f in changes.skipped_files if f.kind != "cosmetic"],
            ["", "**Files not looked at:**"],
            lambda f: [f"- {md.code(f.path)}: {md.plain(f.reason, 300)}"],
            SKIPPED,
            rest_at,
        ),
        _over_cap(changes, rest_at),
        Piece.fixed(
            [line for note in changes.notes[:10] for line in ("", f"_{md.plain(note, 500)}_")]
        ),
    ]


def _named(names: list[str], heading: str, noun: Noun, rest_at: str) -> Piece:
    """Names on one line: all of them, or the first ones and how many more."""
    if not names:
        return Piece.fixed([])

    def line(shown: list[str]) -> list[str]:
        more = len(names) - len(shown)
        and_more = f" and {more} more (in {rest_at})" if more else ""
        return ["", f"{heading} {', '.join(md.code(name) for name in shown)}{and_more}."]

    short = names[:SHORT_LIST]
    return Piece.shortened(
        [
            Version(line(names)),
            Version(line(short), Stage.long_lists, (noun,) * (len(names) - len(short))),
            Version([], Stage.lists, (noun,) * len(names)),
        ]
    )


def _noted(module: ChangedModule) -> list[str]:
    note = md.plain(module.capture_note or "", 300)
    return [f"- {md.code(f'{module.path}:{module.class_name}')}: {note}"]


def _unconfigured(module: ChangedModule) -> list[str]:
    return [
        "",
        f"- {md.code(f'{module.path}:{module.class_name}')} ({md.plain(module.reason, 300)}), "
        f"in {md.code(module.config_path or 'pyproject.toml')}:",
        *([f"  The capture: {md.plain(module.capture_note, 300)}."] if module.capture_note else []),
        "",
        *md.fenced(module.missing_config or "", "toml", limit=4000, indent="  "),
    ]


def _over_cap(changes: ChangeReport, rest_at: str) -> Piece:
    def line(modules: Sequence, more: int) -> list[str]:
        names = ", ".join(md.code(m.target or m.class_name) for m in modules)
        and_more = f" and {more} more (in {rest_at})" if more else ""
        return [
            "",
            f"**Over the cap of {changes.max_targets} targets per run**, not optimized: "
            f"{names}{and_more}. Run them by hand with a workflow_dispatch run.",
        ]

    over = changes.over_cap
    if not over:
        return Piece.fixed([])
    short = over[:SHORT_LIST]
    return Piece.shortened(
        [
            Version(line(over, 0)),
            Version(line(short, len(over) - len(short)), Stage.long_lists,
                    (OVER_CAP,) * (len(over) - len(short))),
            Version([], Stage.lists, (OVER_CAP,) * len(over)),
        ]
    )  # fmt: skip


def judged(judged: JudgingConfig, pull: bool, rest_at: str) -> list[Piece]:
    """Which configuration judged the run (always said), and what of the pull request's was not
    used (a list that may be cut)."""
    if not pull:
        return []
    at = f"the base commit {md.code(judged.commit[:12])}" if judged.commit else "the base commit"
    source = (
        f"{md.code(judged.pyproject)} at {at}"
        if judged.pyproject
        else f"the default settings (no `[tool.kernelpilot]` at {at})"
    )
    return [
        Piece.fixed(["", f"Judged by {source}: a pull request cannot change how it is checked."]),
        _listed(
            judged.refused,
            ["", "Settings in this pull request that were **not** used:"],
            lambda item: [f"- {md.code(item, limit=300)}"],
            REFUSED,
            rest_at,
        ),
    ]


def patch(unpushed: Followup, rest_at: str) -> Piece:
    """A fork's kernel files as a patch, marked as what they are."""
    lines = [
        "",
        "**Kernel files, not pushed.** ⚠️ They were generated from this fork's unreviewed code "
        "and measured in the job that ran it: review every line before using them. kernelpilot "
        "pushes no branch for a fork's pull request. To try them: save the patch and run "
        "`git apply` on the base branch.",
    ]
    whole = [
        "",
        "<details>",
        "<summary>Patch: the kernel files (generated from unreviewed code)</summary>",
        "",
        *md.fenced(as_patch(unpushed), "diff", limit=1_000_000),
        "</details>",
    ]
    left_out = [
        "",
        "_The patch is left out to fit GitHub's comment limit: the kernels' sources are in "
        f"results.json, in {rest_at}._",
    ]
    return Piece([Version(lines + whole), Version(lines + left_out, Stage.sources, (PATCH,))])


def _listed(
    entries: Sequence[Entry],
    header: list[str],
    render: Callable[[Entry], list[str]],
    noun: Noun,
    rest_at: str,
) -> Piece:
    """A list under its header: whole, then its first entries and how many more, then gone."""
    if not entries:
        return Piece.fixed([])
    whole = [line for entry in entries for line in render(entry)]
    more = len(entries) - SHORT_LIST
    short = [line for entry in entries[:SHORT_LIST] for line in render(entry)]
    return Piece.shortened(
        [
            Version([*header, *whole]),
            Version([*header, *short, f"- and {more} more, in {rest_at}"], Stage.long_lists,
                    (noun,) * more)
            if more > 0
            else Version([*header, *whole]),
            Version([], Stage.lists, (noun,) * len(entries)),
        ]
    )  # fmt: skip
