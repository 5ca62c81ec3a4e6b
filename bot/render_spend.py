"""What a target's search spent on the model, per attempt and in total, as the terminal and
report.md show it: prompt tokens, of them those the provider's prompt cache served, completion
tokens and cost. A count the server did not send, or a cost without a price, reads "unknown",
never 0 (``agents.trajectory.CallSpend``)."""

from __future__ import annotations

from agents.trajectory import CallSpend, SearchSpend
from bot import markdown as md
from bot.report import TargetReport

HEADERS = ["attempt", "kind", "outcome", "calls", "prompt tokens", "cached", "completion tokens",
           "cost"]  # fmt: skip
UNKNOWN = "unknown"
CACHED_NOTE = (
    "cached: prompt tokens the provider's prompt cache served, priced at the cached rate where "
    "there is one; unknown: not reported or not priced"
)


def _cached(spend: CallSpend) -> str:
    if spend.cached_tokens is None:
        return UNKNOWN
    share = f" ({spend.cached_tokens / spend.prompt_tokens:.0%})" if spend.prompt_tokens else ""
    return f"{spend.cached_tokens:,}{share}"


def _cost(spend: CallSpend) -> str:
    return UNKNOWN if spend.cost_usd is None else f"${md.number(spend.cost_usd, '.4f')}"


def _numbers(spend: CallSpend) -> list[str]:
    """The cells after the attempt's names: "-" for an attempt that made no call."""
    if not spend.calls:
        return ["0", "-", "-", "-", "-"]
    return [
        str(spend.calls),
        f"{spend.prompt_tokens:,}",
        _cached(spend),
        f"{spend.completion_tokens:,}",
        _cost(spend),
    ]


def spent(row: TargetReport) -> SearchSpend | None:
    """The row's search spend, when its search called a model at all."""
    return row.spend if row.spend is not None and row.spend.total.calls else None


def spend_rows(spend: SearchSpend) -> list[list[str]]:
    """One row per attempt, then the total: plain cells, for the terminal."""
    rows = [
        [attempt.node_id, attempt.kind, attempt.outcome, *_numbers(attempt.spend)]
        for attempt in spend.attempts
    ]
    return [*rows, ["total", "", "", *_numbers(spend.total)]]


def spend_terminal(row: TargetReport) -> list[str]:
    """The row's spend table for the terminal, under a line naming the target; none without
    calls of a model."""
    spend = spent(row)
    if spend is None:
        return []
    rows = [HEADERS, *spend_rows(spend)]
    widths = [max(len(cells[i]) for cells in rows) for i in range(len(HEADERS))]
    lines = ["  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
             for cells in rows]  # fmt: skip
    return [f"{row.target}: model calls per attempt ({CACHED_NOTE})", *lines]


def spend_markdown(row: TargetReport) -> list[str]:
    """The row's spend table for report.md; none without calls of a model."""
    spend = spent(row)
    if spend is None:
        return []
    lines = ["", f"Model calls per attempt ({CACHED_NOTE}):", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for attempt in spend.attempts:
        names = [md.code(attempt.node_id, 40, in_table=True), md.plain(attempt.kind, 20),
                 md.plain(attempt.outcome, 40)]  # fmt: skip
        lines.append("| " + " | ".join([*names, *_numbers(attempt.spend)]) + " |")
    lines.append("| " + " | ".join(["**total**", "", "", *_numbers(spend.total)]) + " |")
    return lines
