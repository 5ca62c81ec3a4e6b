"""One issue, kept up to date, for what the nightly run found: opened on the first night with a
regression, a stale kernel or a missing target, edited on the nights after (never a second
issue), and closed with a comment on the first night with none: a night with benchmarks the
machine was too busy to judge does not close it. Found again by its marker and its author, like
the pull request's sticky comment.
"""

from __future__ import annotations

from collections.abc import Callable

from github import Github, GithubException
from github.Repository import Repository
from requests.exceptions import RetryError

from bot import markdown as md
from bot.github import failure, own_login, written_by
from bot.nightly.run import NightlyReport, render_table

MARKER = "<!-- kernelpilot:nightly -->"


def upkeep_issue(
    client: Github,
    repo: Repository,
    report: NightlyReport,
    plot_url: Callable[[str], str] | None = None,
) -> str | None:
    """Open, edit or close the nightly issue; its URL (None when there is none to show)."""
    try:
        existing = _find(client, repo)
        problems = [row for row in report.rows if row.failed]
        unjudged = [row for row in report.rows if row.status == "unjudged"]
        if not problems and unjudged and existing is not None:
            # Not a night without regressions: the machine was too busy to tell. Kept open,
            # showing the night (its unjudged rows say so), until a night can judge them.
            body = md.capped(f"{MARKER}\n{render_table(report, plot_url)}", where="the nightly run")
            if existing.body != body:
                existing.edit(body=body)
            return existing.html_url
        if not problems:
            if existing is not None:
                existing.create_comment(
                    f"No regression, no stale kernel and no missing target on "
                    f"{md.plain(report.night, 40)} at {md.code(report.commit[:12])}: closing."
                )
                existing.edit(state="closed")
                return existing.html_url
            return None
        gone = sum(row.status in ("stale", "missing") for row in problems)
        slower = len(problems) - gone
        title = md.one_line(
            f"kernelpilot nightly: {slower} slower or failing, {gone} stale or missing",
            md.TITLE_LIMIT,
        )
        body = md.capped(f"{MARKER}\n{render_table(report, plot_url)}", where="the nightly run")
        if existing is None:
            return repo.create_issue(title=title, body=body).html_url
        if existing.title != title or existing.body != body:
            existing.edit(title=title, body=body)
        return existing.html_url
    except (GithubException, RetryError) as err:
        raise failure(err, "keeping the nightly issue up to date") from None


def _find(client: Github, repo: Repository):
    login = own_login(client)
    for issue in repo.get_issues(state="open"):
        if issue.pull_request is not None or not (issue.body or "").startswith(MARKER):
            continue
        if written_by(issue.user, login):
            return issue
    return None
