"""The comment's pieces about the targets: the table, the lines on kernels not offered, and one
folded section per target (``bot.pr.fit`` shortens them to fit GitHub's limit).

A kernel's source is shown only where it is offered: verified and faster by
``harness.judge.accept``'s rules (``TargetReport.improved``), and still so after publish gated it
again. It is folded in its own ``<details>``, or, where the follow-up pull request exists, a link
to it stands in its place. A verified kernel that is not faster is stated with its numbers, never
shown: no one should review, copy or merge code that is not offered.
"""

from __future__ import annotations

from bot import markdown as md
from bot.pr.fit import Noun, Piece, Stage, Version
from bot.render import Column, beyond_noise, device_time_line, markdown_table
from bot.report import Report, TargetReport, TargetStatus
from harness.records import TimingStats, Verdict

SOURCE: Noun = ("kernel source", "kernel sources")
PLANS: Noun = ("module's plan and checks", "modules' plans and checks")
DETAILS: Noun = ("module's section", "modules' sections")
NOT_OFFERED: Noun = ("line on a kernel not offered", "lines on kernels not offered")
ROW: Noun = ("row of the table", "rows of the table")
CUT_SOURCE = ["**Kernel**: its source is left out here to fit GitHub's comment limit.", ""]
SOURCE_LIMIT = 1_000_000  # a source is shown whole or not at all: the fitter leaves it out


def columns(report: Report) -> list[Column]:
    """The comment's table: each cell formatted here (untrusted text as code spans)."""
    return [
        Column("module", lambda row: md.code(row.target, in_table=True)),
        Column("inputs", lambda row: md.code(row.inputs, in_table=True) or "-"),
        Column("eager", lambda row: _ms(row.timings.eager)),
        Column("torch.compile", lambda row: _ms(row.timings.compiled)),
        Column("kernelpilot", lambda row: _ms(row.timings.candidate)),
        Column("vs eager", lambda row: ratio(row.vs_eager)),
        Column("vs compile", lambda row: ratio(row.vs_compile)),
        Column("max error", lambda row: md.number(_max_error(row), ".1e")),
        Column("status", lambda row: status(row, report)),
    ]


def table(report: Report) -> list[Piece]:
    """The header (kept) and one piece per row (the last rows go first, at the very end)."""
    header, separator, *rows = markdown_table(columns(report), report.targets)
    return [
        Piece.fixed(["", header, separator]),
        *(Piece([Version([line]), Version([], Stage.rows, (ROW,))]) for line in rows),
    ]


def not_offered(report: Report) -> Piece:
    """A verified kernel that is not faster is stated as such: never offered as an improvement."""
    lines = []
    for row in report.targets:
        if row.status is TargetStatus.ok and not row.improved:
            versus = ratio(row.vs_eager)
            compile_note = f", {ratio(row.vs_compile)} vs torch.compile" if row.vs_compile else ""
            lines.append(
                f"- {md.code(row.target)}: no faster kernel found. The best verified attempt ran "
                f"{versus} vs eager{compile_note}; it is not offered."
            )
    if not lines:
        return Piece.fixed([])
    return Piece([Version(["", *lines]), Version([], Stage.lists, (NOT_OFFERED,) * len(lines))])


def details(
    row: TargetReport, report: Report, followup_url: str | None, shown_as_patch: bool
) -> Piece:
    """The target's folded section, from whole to gone: its kernel's source first (where it is
    shown), then its plan and checks, then the section. ``shown_as_patch``: the kernel is in the
    fork's patch instead."""
    offered = row.improved and not shown_as_patch
    kernel = _kernel(row, followup_url) if offered else []
    source_shown = offered and not followup_url  # else a link, or nothing: nothing to cut
    without_source = CUT_SOURCE if source_shown else kernel
    cut: tuple[Noun, ...] = (SOURCE,) if source_shown else ()
    plans: tuple[Noun, ...] = (PLANS,) if row.plan or row.checks else ()
    return Piece.shortened(
        [
            Version(_section(row, report, True, kernel)),
            Version(_section(row, report, True, without_source), Stage.sources, cut),
            Version(_section(row, report, False, without_source), Stage.plans, cut + plans),
            Version([], Stage.offered_details if row.improved else Stage.other_details, (DETAILS,)),
        ]
    )


def _section(
    row: TargetReport, report: Report, plan_and_checks: bool, kernel: list[str]
) -> list[str]:
    summary = f"<code>{md.html(row.target)}</code>: {md.html(status(row, report))}"
    lines = ["", "<details>", f"<summary>{summary}</summary>", ""]
    if row.reason:
        lines += md.fenced(row.reason, "text", limit=4000)
    if device := device_time_line(row):
        lines += [device, ""]
    if plan_and_checks:
        if row.plan:
            lines += ["**Plan**", "", *md.fenced(row.plan, "text", limit=4000)]
        if row.checks:
            passed = sum(check.passed for check in row.checks)
            lines += [f"**Checks**: {passed} of {len(row.checks)} passed", ""]
            lines += [
                f"- {'✅' if c.passed else '❌'} {md.code(c.name, 80)}: {md.plain(c.detail, 300)}"
                for c in row.checks[:100]
            ]
            lines.append("")
    search = f"**Search**: {row.attempts} attempt{'s' if row.attempts != 1 else ''}, proposer "
    search += md.code(row.proposer, 80)
    cached = row.spend.total.cached_tokens if row.spend else None  # None: not said
    if row.tokens:
        search += f", {row.tokens:,} tokens" + (f" ({cached:,} cached)" if cached else "")
    if row.cost_usd is not None:
        search += f", ${md.number(row.cost_usd, '.2f')}"
    return [*lines, search, "", *kernel, "</details>"]


def _kernel(row: TargetReport, followup_url: str | None) -> list[str]:
    """The offered kernel: a link to the follow-up pull request where there is one (GitHub's
    own URL, given to publish), else its source folded."""
    if followup_url:
        return [
            f"**Kernel**: in the [follow-up pull request]({followup_url}), with its drop-in "
            "module and test.",
            "",
        ]
    count = len(row.kernel_source.splitlines())
    return [
        "<details>",
        f"<summary>Kernel: the verified source ({count:,} line{'s' if count != 1 else ''})</summary>",
        "",
        *md.fenced(row.kernel_source, "python", limit=SOURCE_LIMIT),
        "</details>",
        "",
    ]


def status(row: TargetReport, report: Report) -> str:
    if row.improved:
        if row.needs_review:
            return f"⚠️ faster, over {md.number(report.review_speedup, 'g', 'x')}: review"
        return "✅ faster"
    if row.status is TargetStatus.ok:
        return "verified, not faster"
    return {
        TargetStatus.no_candidate: "no kernel",
        TargetStatus.weak_spec: "⚠️ weak inputs",
        TargetStatus.unjudged: "⚠️ not judged: machine busy",
        TargetStatus.error: "❌ error",
        TargetStatus.refused: "❌ refused by publish",
    }.get(row.status, f"❌ {md.plain(row.status.value, 40)}")


def ratio(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    return md.number(verdict.speedup, ".2f", "x") + beyond_noise(verdict)


def _ms(stats: TimingStats | None) -> str:
    return md.number(stats.median_ms if stats else None, ".3f", " ms")


def _max_error(row: TargetReport) -> float | None:
    return row.result.max_abs_error if row.result else None
