"""The pull request's sticky comment, rendered from the results record (also the job summary and
what ``kernelpilot review`` prints).

Everything in it that came from the pull request or from generated code (paths, class names,
error text, plans, kernel sources) is data: in table cells it is escaped, longer text goes into
fenced blocks whose fence is longer than any run of backticks inside, and ``@`` is broken so
that no text mentions a user. GitHub refuses a comment over 65,536 characters: details are
dropped in steps (kernel sources, then plans and checks, then the per-module sections) until it
fits, and the comment then says where the rest is (the run's artifacts).
"""

from __future__ import annotations

import re

from bot.changes import ChangeReport
from bot.report import Report, TargetReport
from bot.results import PullResults

MARKER = "<!-- kernelpilot:comment -->"
COMMENT_LIMIT = 65_536
COLUMNS = [
    "module",
    "inputs",
    "eager",
    "torch.compile",
    "kernelpilot",
    "vs eager",
    "vs compile",
    "max error",
    "status",
]
RULES_DOC = "docs/honest-measurement.md"
KERNELPILOT_URL = "https://github.com/kernelpilot/kernelpilot"


def render_comment(results: PullResults, followup_url: str | None = None) -> str:
    """The comment, as full as fits under GitHub's limit."""
    for level in ("full", "no_source", "summary_details", "table_only"):
        body = _render(results, followup_url, level)
        if len(body) <= COMMENT_LIMIT:
            return body
    cut = body[: COMMENT_LIMIT - 300]
    return (
        cut + "\n\n_(cut at GitHub's comment limit; the full report is in the run's artifacts)_\n"
    )


def render_notice(notice: str, commit: str = "") -> str:
    """The sticky comment while nothing runs (a fork awaiting approval)."""
    at = f" (head `{commit[:12]}`)" if commit else ""
    return f"{MARKER}\n## kernelpilot\n\n{_text(notice)}{at}\n"


def _render(results: PullResults, followup_url: str | None, level: str) -> str:
    report = results.report
    lines = [MARKER, "## kernelpilot", ""]
    lines += _headline(results, followup_url)
    if report.targets:
        lines += ["", *_table(report)]
        lines += _not_improved(report)
    if results.changes is not None:
        lines += _changes(results.changes)
    if level != "table_only" and report.targets:
        lines += [""]
        for row in report.targets:
            lines += _details(row, report, level)
    if level != "full":
        where = f"[the run's artifacts]({results.run_url})" if results.run_url else "the artifacts"
        lines += ["", f"_Some details are left out to fit GitHub's comment limit: see {where}._"]
    lines += ["", _footer(results)]
    return "\n".join(lines) + "\n"


def _headline(results: PullResults, followup_url: str | None) -> list[str]:
    report = results.report
    if results.note:
        return [_text(results.note)]
    improved = report.improved()
    changed = len(results.changes.modules) if results.changes else len(report.targets)
    if not report.targets:
        if results.changes is not None and not results.changes.modules:
            return ["No `nn.Module` changed in this pull request: nothing to optimize."]
        return ["No module could be optimized in this run (see below)."]
    noun = "module" if changed == 1 else "modules"
    found = (
        f"**{len(improved)} faster kernel{'s' if len(improved) != 1 else ''} found** "
        f"(best {report.best_speedup():.2f}x vs eager)"
        if improved
        else "**no faster kernel found**"
    )
    first = report.targets[0]
    device = first.device_name or first.device
    torch = f", torch {first.torch_version}" if first.torch_version else ""
    cuda = f", CUDA {results.environment.cuda}" if results.environment.cuda else ""
    lines = [
        f"{changed} changed {noun}, {found}. Verified on {_cell(device)}{torch}{cuda} "
        f"at `{results.commit[:12]}`."
    ]
    if improved and followup_url:
        lines += ["", f"Follow-up pull request with the kernels: {followup_url}"]
    return lines


def _table(report: Report) -> list[str]:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in report.targets:
        cells = [
            f"`{_code(row.target)}`",
            _cell(row.inputs) or "-",
            _ms(row.eager_ms),
            _ms(row.compile_ms),
            _ms(row.candidate_ms),
            _ratio(row.speedup_vs_eager, row.faster_than_eager, row.slower_than_eager),
            _ratio(row.speedup_vs_compile, row.faster_than_compile, row.slower_than_compile),
            "-" if row.max_abs_error is None else f"{row.max_abs_error:.1e}",
            _status(row, report),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _not_improved(report: Report) -> list[str]:
    """A verified kernel that is not faster is stated as such: never offered as an improvement."""
    lines = []
    for row in report.targets:
        if row.status == "ok" and not row.improved:
            versus = _ratio(row.speedup_vs_eager, row.faster_than_eager, row.slower_than_eager)
            compile_note = (
                f", {_ratio(row.speedup_vs_compile, row.faster_than_compile, row.slower_than_compile)}"
                " vs torch.compile"
                if row.speedup_vs_compile is not None
                else ""
            )
            lines.append(
                f"- `{_code(row.target)}`: no faster kernel found. The best verified attempt ran "
                f"{versus} vs eager{compile_note}; it is not offered."
            )
    return ["", *lines] if lines else []


def _status(row: TargetReport, report: Report) -> str:
    if row.improved:
        if row.needs_review:
            return f"⚠️ faster, over {report.review_speedup:g}x: review"
        return "✅ faster"
    if row.status == "ok":
        return "verified, not faster"
    return {
        "no_candidate": "no kernel",
        "weak_spec": "⚠️ weak inputs",
        "error": "❌ error",
    }.get(row.status, f"❌ {row.status}")


def _changes(changes: ChangeReport) -> list[str]:
    lines: list[str] = []
    unconfigured = changes.unconfigured()
    if unconfigured:
        lines += ["", "**Changed modules kernelpilot cannot build inputs for.** Add to the "
                  "`pyproject.toml` named:"]  # fmt: skip
        for module in unconfigured:
            lines += [
                "",
                f"- `{_code(module.path)}:{_code(module.class_name)}` ({_text(module.reason)}), "
                f"in `{_code(module.config_path or 'pyproject.toml')}`:",
                "",
                *_fenced(module.missing_config or "", "toml", indent="  "),
            ]
    if changes.skipped_files:
        lines += ["", "**Files not looked at:**"]
        lines += [f"- `{_code(f.path)}`: {_text(f.reason)}" for f in changes.skipped_files]
    if changes.over_cap:
        names = ", ".join(f"`{_code(m.target or m.class_name)}`" for m in changes.over_cap)
        lines += [
            "",
            f"**Over the cap of {changes.max_targets} targets per run**, not optimized: {names}. "
            "Run them by hand with a workflow_dispatch run.",
        ]
    return lines


def _details(row: TargetReport, report: Report, level: str) -> list[str]:
    summary = f"<b>{_html(row.target)}</b>: {_html(_status(row, report))}"
    lines = ["<details>", f"<summary>{summary}</summary>", ""]
    if row.reason:
        lines += _fenced(row.reason, "text")
    if level in ("full", "no_source"):
        if row.plan:
            lines += ["**Plan**", "", *_fenced(row.plan, "text")]
        if row.checks:
            passed = sum(check.passed for check in row.checks)
            lines += [f"**Checks**: {passed} of {len(row.checks)} passed", ""]
            lines += [
                f"- {'✅' if c.passed else '❌'} `{_code(c.name)}`: {_cell(c.detail)}"
                for c in row.checks
            ]
            lines.append("")
    search = f"**Search**: {row.attempts} attempt{'s' if row.attempts != 1 else ''}, proposer "
    search += f"`{_code(row.proposer)}`"
    if row.tokens:
        search += f", {row.tokens:,} tokens"
    if row.cost_usd is not None:
        search += f", ${row.cost_usd:.2f}"
    lines += [search, ""]
    if level == "full" and row.kernel_source and row.status == "ok":
        lines += ["**Kernel**", "", *_fenced(row.kernel_source, "python")]
    lines += ["</details>", ""]
    return lines


def _footer(results: PullResults) -> str:
    run = f" · [run]({results.run_url})" if results.run_url else ""
    return (
        "<sub>Each kernel was checked against the module on fresh inputs and timed against eager "
        f"and torch.compile: [how kernelpilot measures]({KERNELPILOT_URL}/blob/main/{RULES_DOC})"
        f"{run}</sub>"
    )


# --- formatting ----------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f} ms"


def _ratio(value: float | None, faster: bool, slower: bool) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + ("" if faster else " slower" if slower else " (within noise)")


def _cell(text: str) -> str:
    """Untrusted text in a table cell: one line, no pipes, no HTML, no mentions."""
    text = " ".join(text.split())
    return _no_mentions(_html(text).replace("|", "\\|"))[:300]


def _text(text: str) -> str:
    """Untrusted text as a paragraph."""
    return _no_mentions(_html(text))


def _code(text: str) -> str:
    """Untrusted text inside a code span: no backticks, one line."""
    return " ".join(text.replace("`", "'").split())[:200]


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _no_mentions(text: str) -> str:
    return text.replace("@", "@\u200b")


def _fenced(text: str, language: str, indent: str = "") -> list[str]:
    """A fenced block that no text inside can close."""
    longest = max((len(run) for run in re.findall(r"`+|~+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = [indent + line for line in text.rstrip("\n").split("\n")]
    return [f"{indent}{fence}{language}", *body, f"{indent}{fence}", ""]
