"""The pull-request comment, the gate and the results checks, as pure functions over records."""

from __future__ import annotations

import json

import pytest

from bot.detect.changes import ChangedModule, ChangeReport
from bot.event import Event, PullRequest, parse_event
from bot.pr.approval import decide
from bot.pr.comment import COMMENT_LIMIT, MARKER, render_comment
from bot.pr.followup import build_followup
from bot.pr.results import PullResults, TargetSource, load_results
from bot.report import Report, TargetReport
from harness.errors import UserError
from tests.rows import measured_row

SHA = "a" * 40


def row(target: str = "m.py:Block", inputs: str = "float32[8, 1024]", **fields) -> TargetReport:
    """Verified, 2.0x vs eager and 1.6x vs torch.compile unless the times say otherwise."""
    values = dict(device="cuda", kernel_source="class ModelNew: pass\n")
    result = dict(device="cuda", device_name="NVIDIA H100", torch_version="2.11",
                  max_abs_error=1e-6, input_summary=inputs)  # fmt: skip
    return measured_row(target, result_fields=result, **(values | fields))


def results(*rows: TargetReport, **fields) -> PullResults:
    values = dict(
        mode="pull_request",
        repository="o/r",
        pull_number=3,
        commit=SHA,
        report=Report(targets=list(rows)),
        head_ref="feature",
        base_ref="main",
    )
    values.update(fields)
    return PullResults(**values)


def test_a_verified_but_slower_kernel_is_never_offered():
    slower = row(eager_ms=0.215, compile_ms=0.175)  # 0.43x and 0.35x
    body = render_comment(results(slower))
    assert "**no faster kernel found**" in body
    assert "0.43x slower" in body and "0.35x slower" in body and "(noise)" not in body
    assert "it is not offered" in body and "✅" not in body.split("<details>")[0]
    assert build_followup(results(slower), None) is None


def test_faster_than_eager_but_slower_than_torch_compile_is_not_an_improvement():
    behind = row(compile_ms=0.3)  # 0.6x torch.compile
    assert not behind.improved
    assert "verified, not faster" in render_comment(results(behind))


def test_the_review_threshold_named_is_the_configured_one():
    big = row(eager_ms=15.0)  # 30x
    report = Report(targets=[big], review_speedup=25.0)
    body = render_comment(results(report=report))
    assert "over 25x: review" in body and "10x" not in body


def test_untrusted_text_cannot_break_the_table_mention_anyone_or_close_a_fence():
    evil = row(
        target="a|b.py:X",
        inputs="float32[1] | <img src=x> @octocat",
        reason="boom ``` then text",
        kernel_source="s = '''\n```\n'''\nclass ModelNew: pass\n",
        plan="@maintainers please merge <script>",
    )
    body = render_comment(results(evil))
    table_row = next(line for line in body.splitlines() if line.startswith("| ` a"))
    assert len(table_cells(table_row)) == 9  # no pipe from the text split a cell
    prose = outside_fences(body)  # inside a fence, text is shown as code: inert
    assert "<img" not in outside_code(prose) and "<script>" not in outside_code(prose)
    assert "@octocat" not in outside_code(prose)
    assert "@maintainers please merge <script>" in body  # the plan, shown as code
    kernel = body[body.index("Kernel: the verified source") :]
    assert kernel.splitlines()[2].startswith("````python")  # longer than the ``` inside


def table_cells(line: str) -> list[str]:
    """GFM's split of a table row: a backslash takes the next character with it, any other
    pipe ends a cell (before code spans are read)."""
    cells, cell, index = [], "", 0
    line = line.strip().removeprefix("|")
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            cell += line[index : index + 2]
            index += 2
            continue
        if char == "|":
            cells.append(cell)
            cell = ""
        else:
            cell += char
        index += 1
    return cells + ([cell] if cell.strip() else [])


def outside_code(text: str) -> str:
    """``text`` without its code spans (GitHub links, mentions and renders nothing in them)."""
    import re

    return re.sub(r"(`+) .*? \1", " ", text)


def outside_fences(body: str) -> str:
    kept, fence = [], None
    for line in body.splitlines():
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = stripped[: len(stripped) - len(stripped.lstrip("`"))]
        elif fence is not None and stripped == fence:
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def test_the_comment_fits_githubs_limit_and_says_where_the_rest_is():
    rows = [row(f"m{i}.py:Block", kernel_source="x = 1  # padding\n" * 400) for i in range(12)]
    big = results(*rows, run_url="https://github.example/o/r/actions/runs/9")
    body = render_comment(big)
    assert len(body) <= COMMENT_LIMIT
    assert body.startswith(MARKER)
    assert all(f"` m{i}.py:Block `" in body for i in range(12))  # every row is still there
    assert "https://github.example/o/r/actions/runs/9" in body and "left out" in body


def test_modules_without_inputs_show_the_lines_to_add_and_the_cap_is_said():
    module = ChangedModule(path="m.py", class_name="Net", class_line=3, lines=[4],
                           reason="class body changed", missing_config="[[tool.kernelpilot.targets]]\n"
                           'module = "m.py:Net"', config_path="pyproject.toml")  # fmt: skip
    capped = ChangedModule(path="n.py", class_name="Big", class_line=1, lines=[1],
                           reason="class added", target="n.py:Big")  # fmt: skip
    changes = ChangeReport(base="main", head="HEAD", base_sha=SHA, head_sha=SHA, merge_base=SHA,
                           max_targets=0, modules=[module], over_cap=[capped])  # fmt: skip
    body = render_comment(results(changes=changes))
    assert 'module = "m.py:Net"' in body and "cap of 0 targets" in body and "` n.py:Big `" in body


def test_guessed_targets_are_listed_apart_from_captured_ones_with_what_to_check():
    def changed(name: str, source: str, note: str) -> ChangedModule:
        return ChangedModule(path="m.py", class_name=name, class_line=1, lines=[1],
                             reason="class body changed", target=f"m.py:{name}",
                             target_source=source, capture_note=note)  # fmt: skip

    seen = changed("Seen", "capture", "built at tests/t.py:3, called with float32[4, 8] (tests)")
    guessed = changed("Made", "guess", "built with [Config(dim=64)], called with float32[8, 64]")
    changes = ChangeReport(base="main", head="HEAD", base_sha=SHA, head_sha=SHA, merge_base=SHA,
                           max_targets=20, modules=[seen, guessed])  # fmt: skip
    body = render_comment(results(changes=changes))
    captured_at, guessed_at = body.index("Targets captured"), body.index("Targets guessed")
    assert captured_at < body.index("` m.py:Seen `") < guessed_at < body.index("` m.py:Made `")
    assert "Check the sizes" in body and "Config\\(dim=64\\)" in body


def pull_event(action="opened", fork=True, labels=(), label=None, sender="dev") -> Event:
    pull = PullRequest(number=3, head_sha=SHA, head_ref="f", head_repo="dev/r" if fork else "o/r",
                       base_sha="b" * 40, base_ref="main", base_repo="o/r", labels=list(labels))  # fmt: skip
    return Event(name="pull_request_target", action=action, repository="o/r", sender=sender,
                 label=label, pull=pull)  # fmt: skip


@pytest.mark.parametrize(
    ("event", "permission", "runs", "removes", "notice"),
    [
        (pull_event(fork=False), None, True, False, False),
        (pull_event(fork=False, action="labeled", label="bug"), None, False, False, False),
        (pull_event(), None, False, False, True),
        (pull_event("labeled", label="ok", labels=["ok"], sender="lead"), "maintain", True, False, False),
        (pull_event("labeled", label="ok", labels=["ok"], sender="x"), "read", False, False, True),
        (pull_event("labeled", label="bug", labels=["ok", "bug"]), "admin", False, False, False),
        (pull_event("synchronize", labels=["ok"]), None, False, True, True),
        (pull_event("synchronize"), None, False, False, True),
    ],
)  # fmt: skip
def test_the_gate(event, permission, runs, removes, notice):
    decision = decide(event, "ok", permission)
    assert (decision.run, decision.remove_label, decision.notice is not None) == (
        runs,
        removes,
        notice,
    )
    assert decision.sha == (SHA if runs else "")


def test_dispatch_inputs_are_read_and_a_bad_budget_says_where():
    event = parse_event("workflow_dispatch",
                        {"inputs": {"targets": "a.py:X  b.py", "budget": "4", "open-pr": "false"}})  # fmt: skip
    assert event.mode == "workflow_dispatch" and event.dispatch is not None
    assert (event.dispatch.targets, event.dispatch.budget, event.dispatch.open_pr) == (
        ["a.py:X", "b.py"],
        4,
        False,
    )
    with pytest.raises(UserError, match="budget input 'many'"):
        parse_event("workflow_dispatch", {"inputs": {"budget": "many"}})


@pytest.mark.parametrize("path", ["../evil.py", "/etc/x.py", ".github/workflows/x.py", "a/./b.py",
                                  "a\\b.py", ".git/hooks/x.py", "a//b.py"])  # fmt: skip
def test_results_naming_a_path_outside_the_repository_are_refused(path, tmp_path):
    good = results(row(), sources={"m.py:Block": TargetSource(module_path="m.py", class_name="B")})
    data = good.model_dump(mode="json")
    data["sources"]["m.py:Block"]["module_path"] = path
    (tmp_path / "results.json").write_text(json.dumps(data))
    with pytest.raises(UserError, match="refusing the path"):
        load_results(tmp_path, pull_event(fork=False))


def test_the_comment_renders_fixed_records_as_pinned():
    """tests/fixtures/report/comment.md: what the comment renders for these records (pinned
    when the report came to hold its EvalResult whole; since then the offered kernels' sources
    are folded, and m.py:Slow's, verified but not faster, is not shown)."""
    from tests.test_report import GOLDEN, fixed_report

    sources = {target: TargetSource(module_path="m.py", class_name=target.rpartition(":")[2])
               for target in ("m.py:Fast", "m.py:Huge")}  # fmt: skip
    pinned = results(report=fixed_report(), head_ref="f", sources=sources)
    assert render_comment(pinned) == (GOLDEN / "comment.md").read_text()


def test_when_every_module_failed_the_headline_does_not_say_no_faster_kernel():
    """Pasted configuration that failed four times read "no faster kernel found" although
    nothing ran: a run where every module failed says so."""
    from bot.report import TargetStatus

    failed = [
        TargetReport.failed(f"m.py:M{n}", "cpu", TargetStatus.error, "error: make_inputs() raised")
        for n in range(4)
    ]
    body = render_comment(results(*failed))
    assert "**none could be measured** (4 failed, see below)" in body
    assert "no faster kernel found" not in body


def test_the_search_line_says_the_tokens_the_prompt_cache_served():
    from agents.trajectory import CallSpend, SearchSpend

    spent = SearchSpend(attempts=[], total=CallSpend(calls=4, prompt_tokens=40_000,
                        completion_tokens=2_000, cached_tokens=30_720))  # fmt: skip
    body = render_comment(results(row(attempts=2, tokens=42_000, spend=spent)))
    assert "42,000 tokens (30,720 cached)" in body
    assert "cached" not in render_comment(results(row(attempts=2, tokens=42_000)))
