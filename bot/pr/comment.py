"""The pull request's sticky comment, rendered from the results record (also the job summary and
what ``kernelpilot review`` prints).

Everything in it that came from the pull request's job (paths, class names, device names, error
text, plans, checks, kernel sources, the configuration's refused settings) goes through
``bot.markdown``, the one renderer of untrusted text: code spans and fenced blocks that nothing
inside can close, escaped prose, no mention, reference, link, image or HTML of the text's own.
The only links are kernelpilot's own and those publish got from GitHub or its own run. GitHub
refuses a comment over 65,536 characters: details are dropped in steps (the fork's patch and
kernel sources, then plans and checks, then the per-module sections) until it fits, and the
comment then says where the rest is (the run's artifacts).
"""

from __future__ import annotations

from bot import markdown as md
from bot.detect.changes import ChangeReport
from bot.pr.base_config import JudgingConfig
from bot.pr.followup import Followup, as_patch
from bot.pr.results import PullResults
from bot.render import Column, beyond_noise, markdown_table
from bot.report import Report, TargetReport, TargetStatus
from harness.records import TimingStats, Verdict

MARKER = "<!-- kernelpilot:comment -->"
COMMENT_LIMIT = 65_536
RULES_DOC = "docs/honest-measurement.md"
KERNELPILOT_URL = "https://github.com/kernelpilot/kernelpilot"


def render_comment(
    results: PullResults,
    followup_url: str | None = None,
    unpushed: Followup | None = None,
    no_followup: str = "",
) -> str:
    """The comment, as full as fits under GitHub's limit. ``unpushed``: the follow-up's files
    when they are not pushed (a fork's pull request), shown as a patch; ``no_followup``: why
    there is no follow-up pull request although a kernel is offered."""
    body = ""
    for level in ("full", "no_source", "summary_details", "table_only"):
        body = _render(results, followup_url, unpushed, no_followup, level)
        if len(body) <= COMMENT_LIMIT:
            return body
    return md.capped(body, COMMENT_LIMIT, _artifacts(results))


def render_notice(notice: str, commit: str = "") -> str:
    """The sticky comment while nothing runs (a fork awaiting approval)."""
    at = f" (head {md.code(commit[:12])})" if commit else ""
    return f"{MARKER}\n## kernelpilot\n\n{md.plain(notice)}{at}\n"


def _render(
    results: PullResults,
    followup_url: str | None,
    unpushed: Followup | None,
    no_followup: str,
    level: str,
) -> str:
    report = results.report
    lines = [MARKER, "## kernelpilot", ""]
    if results.sandbox == "off":
        lines += [
            "> ⚠️ **Run without the sandbox**: this workflow set `KERNELPILOT_SANDBOX=off`, so "
            "the pull request's code ran with the runner's files and network in reach "
            "(docs/security.md).",
            "",
        ]
    lines += _headline(results, followup_url)
    if no_followup and report.improved():
        lines += ["", f"No follow-up pull request: {md.plain(no_followup)}."]
    if report.targets:
        lines += ["", *_table(report)]
        lines += _not_improved(report)
    if results.changes is not None:
        lines += _changes(results.changes)
    if unpushed is not None:
        lines += _patch(unpushed, level)
    if level != "table_only" and report.targets:
        lines += [""]
        for row in report.targets:
            lines += _details(row, report, level, shown_as_patch=unpushed is not None)
    if level != "full":
        lines += [
            "",
            f"_Some details are left out to fit GitHub's comment limit: see {_artifacts(results)}._",
        ]
    lines += _judged(results.judged_by, results.pull_number is not None)
    lines += ["", _footer(results)]
    return "\n".join(lines) + "\n"


def _artifacts(results: PullResults) -> str:
    """Where the rest is. ``run_url`` is the publishing job's own (set by publish from its
    environment, never the artifact's)."""
    return f"[the run's artifacts]({results.run_url})" if results.run_url else "the run's artifacts"


def _patch(unpushed: Followup, level: str) -> list[str]:
    """A fork's kernel files as a patch, marked as what they are."""
    lines = [
        "",
        "**Kernel files, not pushed.** ⚠️ They were generated from this fork's unreviewed code "
        "and measured in the job that ran it: review every line before using them. kernelpilot "
        "pushes no branch for a fork's pull request. To try them: save the patch and run "
        "`git apply` on the base branch.",
    ]
    if level != "full":
        return [*lines, "", "_The patch is left out to fit GitHub's comment limit._"]
    return [
        *lines,
        "",
        "<details>",
        "<summary>Patch: the kernel files (generated from unreviewed code)</summary>",
        "",
        *md.fenced(as_patch(unpushed), "diff", limit=COMMENT_LIMIT),
        "</details>",
    ]


def _judged(judged: JudgingConfig, pull: bool) -> list[str]:
    """Which configuration judged the run, and what of the pull request's was not used."""
    if not pull:
        return []
    at = f"the base commit {md.code(judged.commit[:12])}" if judged.commit else "the base commit"
    source = (
        f"{md.code(judged.pyproject)} at {at}"
        if judged.pyproject
        else f"the default settings (no `[tool.kernelpilot]` at {at})"
    )
    lines = ["", f"Judged by {source}: a pull request cannot change how it is checked."]
    if judged.refused:
        lines += ["", "Settings in this pull request that were **not** used:"]
        lines += [f"- {md.code(item, limit=300)}" for item in judged.refused[:50]]
        if len(judged.refused) > 50:
            lines.append(f"- and {len(judged.refused) - 50} more")
    return lines


def _headline(results: PullResults, followup_url: str | None) -> list[str]:
    report = results.report
    if results.note:
        return [md.plain(results.note)]
    improved = report.improved()
    changed = len(results.changes.modules) if results.changes else len(report.targets)
    if not report.targets:
        if results.changes is not None and not results.changes.modules:
            return ["No `nn.Module` changed in this pull request: nothing to optimize."]
        return ["No module could be optimized in this run (see below)."]
    noun = "module" if changed == 1 else "modules"
    found = (
        f"**{len(improved)} faster kernel{'s' if len(improved) != 1 else ''} found** "
        f"(best {md.number(report.best_speedup(), '.2f', 'x')} vs eager)"
        if improved
        else "**no faster kernel found**"
    )
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


def columns(report: Report) -> list[Column]:
    """The comment's table: each cell formatted here (untrusted text as code spans)."""
    return [
        Column("module", lambda row: md.code(row.target, in_table=True)),
        Column("inputs", lambda row: md.code(row.inputs, in_table=True) or "-"),
        Column("eager", lambda row: _ms(row.timings.eager)),
        Column("torch.compile", lambda row: _ms(row.timings.compiled)),
        Column("kernelpilot", lambda row: _ms(row.timings.candidate)),
        Column("vs eager", lambda row: _ratio(row.vs_eager)),
        Column("vs compile", lambda row: _ratio(row.vs_compile)),
        Column("max error", lambda row: md.number(_max_error(row), ".1e")),
        Column("status", lambda row: _status(row, report)),
    ]


def _table(report: Report) -> list[str]:
    return markdown_table(columns(report), report.targets)


def _not_improved(report: Report) -> list[str]:
    """A verified kernel that is not faster is stated as such: never offered as an improvement."""
    lines = []
    for row in report.targets:
        if row.status is TargetStatus.ok and not row.improved:
            versus = _ratio(row.vs_eager)
            compile_note = f", {_ratio(row.vs_compile)} vs torch.compile" if row.vs_compile else ""
            lines.append(
                f"- {md.code(row.target)}: no faster kernel found. The best verified attempt ran "
                f"{versus} vs eager{compile_note}; it is not offered."
            )
    return ["", *lines] if lines else []


def _status(row: TargetReport, report: Report) -> str:
    if row.improved:
        if row.needs_review:
            return f"⚠️ faster, over {md.number(report.review_speedup, 'g', 'x')}: review"
        return "✅ faster"
    if row.status is TargetStatus.ok:
        return "verified, not faster"
    return {
        TargetStatus.no_candidate: "no kernel",
        TargetStatus.weak_spec: "⚠️ weak inputs",
        TargetStatus.error: "❌ error",
        TargetStatus.refused: "❌ refused by publish",
    }.get(row.status, f"❌ {md.plain(row.status.value, 40)}")


def _changes(changes: ChangeReport) -> list[str]:
    lines: list[str] = []
    unconfigured = [m for m in changes.unconfigured() if m.relation != "user"]
    users = [
        md.code(f"{m.path}:{m.class_name}") for m in changes.unconfigured() if m.relation == "user"
    ]
    if unconfigured:
        lines += ["", "**Changed modules kernelpilot cannot build inputs for.** Add to the "
                  "`pyproject.toml` named:"]  # fmt: skip
        for module in unconfigured:
            lines += [
                "",
                f"- {md.code(f'{module.path}:{module.class_name}')} ({md.plain(module.reason, 300)}), "
                f"in {md.code(module.config_path or 'pyproject.toml')}:",
                "",
                *md.fenced(module.missing_config or "", "toml", limit=4000, indent="  "),
            ]
    if users:
        lines += ["", "**Modules that use a changed module**, without inputs (a "
                  "`[[tool.kernelpilot.targets]]` entry for one optimizes it too): "
                  f"{', '.join(users[:100])}{', …' if len(users) > 100 else ''}."]  # fmt: skip
    cosmetic = [md.code(f.path) for f in changes.skipped_files if f.kind == "cosmetic"]
    cosmetic += [md.code(f"{m.path}:{m.class_name}") for m in changes.cosmetic]
    if cosmetic:
        lines += ["", "**Changed only in comments, docstrings or formatting**, so not optimized: "
                  f"{', '.join(cosmetic[:100])}."]  # fmt: skip
    skipped = [f for f in changes.skipped_files if f.kind != "cosmetic"]
    if skipped:
        lines += ["", "**Files not looked at:**"]
        lines += [f"- {md.code(f.path)}: {md.plain(f.reason, 300)}" for f in skipped[:100]]
    for note in changes.notes[:10]:
        lines += ["", f"_{md.plain(note, 500)}_"]
    if changes.over_cap:
        names = ", ".join(md.code(m.target or m.class_name) for m in changes.over_cap[:100])
        lines += [
            "",
            f"**Over the cap of {changes.max_targets} targets per run**, not optimized: {names}. "
            "Run them by hand with a workflow_dispatch run.",
        ]
    return lines


def _details(row: TargetReport, report: Report, level: str, shown_as_patch: bool) -> list[str]:
    summary = f"<code>{md.html(row.target)}</code>: {md.html(_status(row, report))}"
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    if row.reason:
        lines += md.fenced(row.reason, "text", limit=4000)
    if level in ("full", "no_source"):
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
    if row.tokens:
        search += f", {row.tokens:,} tokens"
    if row.cost_usd is not None:
        search += f", ${md.number(row.cost_usd, '.2f')}"
    lines += [search, ""]
    if (
        level == "full"
        and row.kernel_source
        and row.status is TargetStatus.ok
        and not shown_as_patch
    ):
        lines += ["**Kernel**", "", *md.fenced(row.kernel_source, "python", limit=COMMENT_LIMIT)]
    lines += ["</details>", ""]
    return lines


def _footer(results: PullResults) -> str:
    run = f" · [run]({results.run_url})" if results.run_url else ""  # publish's own run
    return (
        "<sub>Each kernel was checked against the module on fresh inputs and timed against eager "
        f"and torch.compile: [how kernelpilot measures]({KERNELPILOT_URL}/blob/main/{RULES_DOC})"
        f"{run}</sub>"
    )


# --- formatting ----------------------------------------------------------------------------


def _ms(stats: TimingStats | None) -> str:
    return md.number(stats.median_ms if stats else None, ".3f", " ms")


def _max_error(row: TargetReport) -> float | None:
    return row.result.max_abs_error if row.result else None


def _ratio(verdict: Verdict | None) -> str:
    if verdict is None:
        return "-"
    return md.number(verdict.speedup, ".2f", "x") + beyond_noise(verdict)
