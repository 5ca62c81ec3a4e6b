"""The nightly issue on the fake GitHub, through the real PyGithub client: opened on a night
with a regression, edited (not duplicated) on the next, closed on the first night without."""

from __future__ import annotations

from bot.nightly.history import Record
from bot.nightly.issue import MARKER, upkeep_issue
from bot.nightly.run import NightlyReport, NightlyRow

REPO = "acme/models"


def report(night: str, *statuses: str) -> NightlyReport:
    rows = [
        NightlyRow(
            benchmark=f"kernel:k{i}.py",
            status=status,
            reason=f"{status} on {night}",
            record=Record(
                benchmark=f"kernel:k{i}.py",
                night=night,
                commit="c" * 40,
                device="cuda",
                status="ok" if status in ("ok", "alert") else status,
                time_ms=1.0,
            ),
        )  # fmt: skip
        for i, status in enumerate(statuses)
    ]
    return NightlyReport(commit="c" * 40, night=night, rows=rows)


def ours(fake) -> list:
    return [i for i in fake.repo(REPO).issues.values()
            if i.pull is None and (i.body or "").startswith(MARKER)]  # fmt: skip


def test_the_issue_is_opened_kept_up_to_date_and_closed(fake_github):
    fake_github.add_user("gh-token", "github-actions[bot]", "write")
    fake_github.add_repo(REPO)
    client = fake_github.client("gh-token")
    repo = client.get_repo(REPO)

    assert upkeep_issue(client, repo, report("2026-11-20", "ok", "ok")) is None
    assert upkeep_issue(client, repo, report("2026-11-20", "unjudged", "ok")) is None
    assert ours(fake_github) == []

    url = upkeep_issue(client, repo, report("2026-11-21", "alert", "ok"))
    [issue] = ours(fake_github)
    assert url and url.endswith(f"/issues/{issue.number}")
    assert issue.title == "kernelpilot nightly: 1 slower or failing, 0 stale or missing"
    assert "alert on 2026-11-21" in issue.body

    upkeep_issue(client, repo, report("2026-11-22", "alert", "stale"))
    [issue] = ours(fake_github)  # edited, not a second one
    assert (
        issue.title.endswith("1 slower or failing, 1 stale or missing")
        and "2026-11-22" in issue.body
    )

    # a night the machine was too busy to judge one of them: not a night without regressions
    upkeep_issue(client, repo, report("2026-11-23", "unjudged", "ok"))
    [issue] = ours(fake_github)
    assert issue.state == "open" and "| unjudged |" in issue.body and "2026-11-23" in issue.body
    assert fake_github.comments(REPO, issue.number) == []

    upkeep_issue(client, repo, report("2026-11-23", "ok", "ok"))
    [issue] = ours(fake_github)
    assert issue.state == "closed"
    assert "2026-11-23" in fake_github.comments(REPO, issue.number)[-1].body

    upkeep_issue(client, repo, report("2026-11-24", "fail", "ok"))
    assert [i.state for i in ours(fake_github)] == ["closed", "open"]  # a new episode


def test_someone_elses_issue_quoting_the_marker_is_left_alone(fake_github):
    fake_github.add_user("gh-token", "github-actions[bot]", "write")
    fake_github.add_user("person-token", "person", "write")
    fake_github.add_repo(REPO)
    person = fake_github.client("person-token").get_repo(REPO)
    person.create_issue(title="copied", body=MARKER + "\nI pasted this")
    client = fake_github.client("gh-token")
    upkeep_issue(client, client.get_repo(REPO), report("2026-11-21", "alert"))
    assert sorted(i.title for i in ours(fake_github)) == [
        "copied", "kernelpilot nightly: 1 slower or failing, 0 stale or missing"]  # fmt: skip


def test_a_missing_target_counts_with_the_stale_kernels_and_shows_no_kernel_time(fake_github):
    fake_github.add_user("gh-token", "github-actions[bot]", "write")
    fake_github.add_repo(REPO)
    client = fake_github.client("gh-token")
    night = report("2026-11-21", "stale")
    gone = "error: the configured target's file m.py does not exist\n  where: pyproject.toml\n  fix: restore it"
    night.rows.append(
        NightlyRow(
            benchmark="target:m.py:Net",
            status="missing",
            reason=gone,
            record=Record(
                benchmark="target:m.py:Net",
                night=night.night,
                commit="c" * 40,
                device="cuda",
                status="missing",
                note=gone,
            ),
        )  # fmt: skip
    )
    upkeep_issue(client, client.get_repo(REPO), night)
    [issue] = ours(fake_github)
    assert issue.title == "kernelpilot nightly: 0 slower or failing, 2 stale or missing"
    assert "| `target:m.py:Net` | missing | — | - | - | - |" in issue.body
    assert "\n  - `where: pyproject.toml`\n  - `fix: restore it`" in issue.body
