"""The pull request's sticky comment, rendered from the results record (also the job summary and
what ``kernelpilot review`` prints).

Everything in it that came from the pull request's job (paths, class names, device names, error
text, plans, checks, kernel sources, the configuration's refused settings) goes through
``bot.markdown``, the one renderer of untrusted text: code spans and fenced blocks that nothing
inside can close, escaped prose, no mention, reference, link, image or HTML of the text's own.
The only links are kernelpilot's own and those publish got from GitHub or its own run.

Only offered kernels are shown (``bot.pr.comment_targets``), folded or as a link to the
follow-up. GitHub refuses a comment over 65,536 characters: whole pieces are left out in a set
order until it fits (``bot.pr.fit``: sources, plans and checks, sections, lists, rows), never a
cut through a fence or a ``<details>``, and a line says what is missing and where it is.
"""

from __future__ import annotations

from collections import Counter

from bot import markdown as md
from bot.pr import comment_context as context
from bot.pr import comment_targets as targets
from bot.pr.fit import Noun, Piece, fit
from bot.pr.followup import Followup
from bot.pr.results import PullResults

MARKER = "<!-- kernelpilot:comment -->"
COMMENT_LIMIT = md.BODY_LIMIT  # 65,536 characters: GitHub refuses a longer comment
RULES_DOC = "docs/honest-measurement.md"
KERNELPILOT_URL = "https://github.com/kernelpilot/kernelpilot"


def render_comment(
    results: PullResults,
    followup_url: str | None = None,
    unpushed: Followup | None = None,
    no_followup: str = "",
) -> str:
    """The comment, as full as fits under GitHub's limit. ``followup_url``: the follow-up
    pull request, where publish opened it (GitHub's answer); ``unpushed``: the follow-up's files
    when they are not pushed (a fork's pull request), shown as a patch; ``no_followup``: why
    there is no follow-up pull request although a kernel is offered."""
    report = results.report
    rest_at = _artifacts(results)
    pieces = [Piece.fixed(_top(results, followup_url, no_followup))]
    if report.targets:
        pieces += [*targets.table(report), targets.not_offered(report)]
    if results.changes is not None:
        pieces += context.changes(results.changes, rest_at)
    if unpushed is not None:
        pieces.append(context.patch(unpushed, rest_at))
    pieces += [
        targets.details(row, report, followup_url, shown_as_patch=unpushed is not None)
        for row in report.targets
    ]
    pieces += context.judged(results.judged_by, results.pull_number is not None, rest_at)
    pieces.append(Piece.fixed(["", _footer(results)]))
    return fit(pieces, COMMENT_LIMIT, lambda left_out: _left_out(left_out, rest_at))


def render_notice(notice: str, commit: str = "") -> str:
    """The sticky comment while nothing runs (a fork awaiting approval)."""
    at = f" (head {md.code(commit[:12])})" if commit else ""
    return f"{MARKER}\n## kernelpilot\n\n{md.plain(notice)}{at}\n"


def _top(results: PullResults, followup_url: str | None, no_followup: str) -> list[str]:
    lines = [MARKER, "## kernelpilot", ""]
    if results.sandbox == "off":
        lines += [
            "> ⚠️ **Run without the sandbox**: this workflow set `KERNELPILOT_SANDBOX=off`, so "
            "the pull request's code ran with the runner's files and network in reach "
            "(docs/security.md).",
            "",
        ]
    lines += _headline(results, followup_url)
    if no_followup and results.report.improved():
        lines += ["", f"No follow-up pull request: {md.plain(no_followup)}."]
    return lines


def _left_out(left_out: Counter[Noun], rest_at: str) -> list[str]:
    """The line that says what the comment lacks and where it is."""
    things = ", ".join(
        f"{count} {singular if count == 1 else plural}"
        for (singular, plural), count in left_out.items()
    )
    return [
        "",
        f"_Left out to fit GitHub's comment limit of {COMMENT_LIMIT:,} characters: {things}. "
        f"Everything is in results.json, in {rest_at}._",
    ]


def _artifacts(results: PullResults) -> str:
    """Where the rest is. ``run_url`` is the publishing job's own (set by publish from its
    environment, never the artifact's)."""
    return f"[the run's artifacts]({results.run_url})" if results.run_url else "the run's artifacts"


def _headline(results: PullResults, followup_url: str | None) -> list[str]:
    report = results.report
    if results.note:
        return [md.plain(results.note)]
    improved = report.improved()
    changed = len(results.changes.modules) if results.changes else len(report.targets)
    if not report.targets:
        changes = results.changes
        if changes is not None and not changes.modules:
            if changes.cosmetic or any(f.kind == "cosmetic" for f in changes.skipped_files):
                return [
                    "Only comments, docstrings or formatting of `nn.Module`s changed in this "
                    "pull request: nothing to optimize."
                ]
            return ["No `nn.Module` changed in this pull request: nothing to optimize."]
        return ["No module could be optimized in this run (see below)."]
    noun = "module" if changed == 1 else "modules"
    failed = sum(row.status.failed for row in report.targets)
    if improved:
        found = (
            f"**{len(improved)} faster kernel{'s' if len(improved) != 1 else ''} found** "
            f"(best {md.number(report.best_speedup(), '.2f', 'x')} vs eager)"
        )
    elif failed == len(report.targets):  # nothing was measured: not "no faster kernel"
        found = f"**none could be measured** ({failed} failed, see below)"
    else:
        found = "**no faster kernel found**" + (f" ({failed} failed, see below)" if failed else "")
    first = report.targets[0]
    device = first.device_name or first.device
    torch = f", torch {md.plain(first.torch_version, 40)}" if first.torch_version else ""
    cuda = f", CUDA {md.plain(results.environment.cuda, 40)}" if results.environment.cuda else ""
    lines = [
        f"{changed} changed {noun}, {found}. Verified on {md.plain(device, 100)}{torch}{cuda} "
        f"at {md.code(results.commit[:12])}."
    ]
    if improved and followup_url:  # GitHub's own answer when publish opened it
        lines += ["", f"Follow-up pull request with the kernels: {followup_url}"]
    return lines


def _footer(results: PullResults) -> str:
    run = f" · [run]({results.run_url})" if results.run_url else ""  # publish's own run
    return (
        "<sub>Each kernel was checked against the module on fresh inputs and timed against eager "
        f"and torch.compile: [how kernelpilot measures]({KERNELPILOT_URL}/blob/main/{RULES_DOC})"
        f"{run}</sub>"
    )
