"""What the comment shows of the kernels (offered ones only, folded or as a link), that it stays
under GitHub's size limit as well-formed markdown whatever the run holds, and that the runner's
paths never reach it."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from bot.detect.changes import ChangedModule, ChangeReport
from bot.detect.head import SkippedFile
from bot.pr.base_config import JudgingConfig
from bot.pr.comment import COMMENT_LIMIT, MARKER, render_comment
from bot.pr.fit import Piece, fit, size
from bot.pr.runner_paths import scrubbed
from bot.report import TargetReport, TargetStatus
from harness.records import Check
from tests.test_comment import SHA, results, row

RUN = "https://github.example/o/r/actions/runs/9"


def kernel(tag: str, lines: int) -> str:
    return f"class ModelNew:  # {tag}\n" + f"    x = 1  # {tag} padding\n" * lines


def well_formed(body: str) -> None:
    """Every fence closed, every ``<details>`` closed in order, none opened inside a fence."""
    fence, depth = None, 0
    for number, line in enumerate(body.splitlines(), 1):
        stripped = line.strip()
        if fence is not None:
            if stripped == fence:
                fence = None
            continue
        opening = re.match(r"`{3,}", stripped)
        if opening:
            fence = opening.group(0)
        elif stripped == "<details>":
            depth += 1
        elif stripped == "</details>":
            depth -= 1
            assert depth >= 0, f"line {number}: </details> without <details>"
    assert fence is None, "a fenced block was left open"
    assert depth == 0, f"{depth} <details> left open"


def offered_and_slower(count: int, lines: int) -> list:
    offered = [row(f"fast{i}.py:Block", kernel_source=kernel(f"OFFERED_{i}", lines))
               for i in range(count)]  # fmt: skip
    slower = [row(f"slow{i}.py:Block", eager_ms=0.4, kernel_source=kernel(f"SLOWER_{i}", lines))
              for i in range(count)]  # fmt: skip
    return offered + slower


def test_only_offered_kernels_are_shown_each_folded_in_its_own_details():
    rows = offered_and_slower(3, 40)
    assert all(r.improved for r in rows[:3]) and not any(r.improved for r in rows[3:])
    body = render_comment(results(*rows))
    well_formed(body)
    assert "SLOWER_" not in body  # verified but not faster: its code is never shown
    for i in range(3):
        at = body.index(f"# OFFERED_{i}\n")
        folded = body.rindex("<summary>Kernel: the verified source (41 lines)</summary>", 0, at)
        assert "</details>" not in body[folded:at]
    assert "Left out" not in body


def test_with_a_followup_the_kernel_is_a_link_not_its_source():
    url = "https://github.example/o/r/pull/8"
    body = render_comment(results(*offered_and_slower(2, 40)), followup_url=url)
    well_formed(body)
    assert "OFFERED_" not in body and "SLOWER_" not in body
    assert body.count(f"**Kernel**: in the [follow-up pull request]({url})") == 2


def test_a_big_run_fits_githubs_limit_as_well_formed_markdown_and_says_what_is_left_out():
    rows = offered_and_slower(8, 300)  # 16 kernels of about 10 KB each
    checks = [Check(name=f"check{i}", passed=False, detail="𝒳 detail " * 30) for i in range(40)]
    rows += [
        TargetReport(
            target=f"err{i}.py:Block",
            device="cuda",
            status=TargetStatus.error,
            reason="𝒳 traceback line\n" * 600,
            plan="plan 𝒳 " * 700,
        )  # fmt: skip
        for i in range(4)
    ]
    rows[0].result.checks = checks  # type: ignore[union-attr]
    unconfigured = [
        ChangedModule(path=f"u{i}.py", class_name="Net", class_line=1, lines=[1],
                      reason="no inputs", missing_config="[[tool.kernelpilot.targets]]\n" * 20)
        for i in range(30)
    ]  # fmt: skip
    skipped = [SkippedFile(path=f"gen/file{i}.py", kind="binary", reason="not UTF-8 text " * 10)
               for i in range(300)]  # fmt: skip
    changes = ChangeReport(base="main", head="HEAD", base_sha=SHA, head_sha=SHA, merge_base=SHA,
                           max_targets=20, modules=unconfigured, skipped_files=skipped)  # fmt: skip
    judged = JudgingConfig(commit="b" * 40, refused=[f"eval.setting_{i} = 1" for i in range(80)])
    big = results(*rows, changes=changes, judged_by=judged, run_url=RUN)

    body = render_comment(big)
    assert size(body) <= COMMENT_LIMIT  # counted as UTF-16, the 𝒳 are two each
    assert body.startswith(MARKER)
    well_formed(body)
    assert "SLOWER_" not in body
    assert all(f"` {r.target} `" in body for r in rows)  # every row of the table is there
    [note] = [line for line in body.splitlines() if line.startswith("_Left out to fit")]
    assert "8 kernel sources" in note and f"[the run's artifacts]({RUN})" in note
    assert "Judged by" in body and body.rstrip().endswith("</sub>")


def test_many_targets_drop_rows_last_first_and_say_how_many():
    rows = [row(f"{'m' * 150}{i}.py:{'B' * 40}", inputs="float32[8, 1024] " * 10)
            for i in range(400)]  # fmt: skip
    body = render_comment(results(*rows, run_url=RUN))
    assert size(body) <= COMMENT_LIMIT
    well_formed(body)
    shown = [i for i in range(400) if f"{'m' * 150}{i}.py" in body]
    assert shown == list(range(len(shown))) and 0 < len(shown) < 400
    assert f"{400 - len(shown)} rows of the table" in body


def test_fixed_pieces_over_the_limit_are_a_bug_not_a_cut():
    with pytest.raises(ValueError, match="over 10 characters"):
        fit([Piece.fixed(["x" * 20])], 10, lambda left_out: [])


def test_runner_paths_never_reach_the_comment(tmp_path):
    root = tmp_path / "checkout"
    scratch = f"{tempfile.gettempdir()}/kernelpilot-run-123-x"
    home = str(Path.home())
    failed = TargetReport.failed(
        "models/act.py:Act", "cuda", TargetStatus.error,
        f"cannot import {root}/models/act.py: {scratch}/candidate-ab/main.cpp:3: error\n"
        f"  where: {root}\n  fix: see {home}/.cache/kernelpilot/build/x.log",
    )  # fmt: skip
    verified = row("models/fast.py:Fast", kernel_source=f"# built in {root}\nclass ModelNew: ...\n")
    verified.result.checks = [  # type: ignore[union-attr]
        Check(
            name="correct", passed=True, detail=f"in /tmp/kernelpilot-run-9-y/job and {root}/models"
        )
    ]
    changes = ChangeReport(
        base="main", head="HEAD", base_sha=SHA, head_sha=SHA, merge_base=SHA, max_targets=20,
        skipped_files=[SkippedFile(path="gen/x.py", kind="binary",
                                   reason=f"{root}/gen/x.py is not UTF-8")],
    )  # fmt: skip
    clean = scrubbed(results(failed, verified, changes=changes), root)
    body = render_comment(clean)
    for private in (str(root), "kernelpilot-run-", str(tmp_path)):
        assert private not in body.replace(f"# built in {root}", ""), private
    if home != "/":
        assert home not in body.replace(f"# built in {root}", "")
    assert "cannot import models/act.py: <scratch>/candidate-ab/main.cpp:3" in body
    assert "where: .\n" in body and "~/.cache/kernelpilot/build/x.log" in body
    assert "`: gen/x.py is not UTF-8" in body
    # The verified kernel is shipped byte for byte: its text is not rewritten.
    assert clean.report.targets[1].kernel_source == verified.kernel_source
