"""The report's times and speedups agree: a reader can recompute every speedup from the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot import render
from bot.render import render_junit, render_markdown, render_terminal, table_rows, write_report
from bot.report import Report, TargetReport, TargetStatus
from harness.config import EvalConfig
from harness.judge.verdict import judge_timing
from harness.records import Check, EvalResult, Status, Timings, TimingStats


def _stats(median_ms: float) -> TimingStats:
    return TimingStats(
        median_ms=median_ms, iqr_ms=0.01 * median_ms, min_ms=0.98 * median_ms, samples=50
    )


@pytest.mark.parametrize(
    ("beside_ms", "alone_ms", "expected_eager_ms", "compiled_alone_ms", "expected_compile_ms"),
    [
        (2.0, 1.8, 1.8, 1.3, 1.3),
        (1.8, 2.0, 1.8, 1.7, 1.5),
        (2.0, None, 2.0, None, 1.5),
    ],
)
def test_eager_ms_and_compile_ms_are_the_baselines_the_speedups_are_taken_against(
    tmp_path, beside_ms, alone_ms, expected_eager_ms, compiled_alone_ms, expected_compile_ms
):
    result = EvalResult(
        status=Status.ok,
        timings=Timings(
            eager_beside=_stats(beside_ms),
            eager_alone=_stats(alone_ms) if alone_ms else None,
            compiled_beside=_stats(1.5),
            compiled_alone=_stats(compiled_alone_ms) if compiled_alone_ms else None,
            candidate=_stats(1.0),
        ),
    )
    judge_timing(result, EvalConfig())
    row = TargetReport.from_result("t", result, None)
    eager, compiled, kernel = row.timings.eager, row.timings.compiled, row.timings.candidate
    assert eager is not None and compiled is not None and kernel is not None
    assert eager.median_ms == expected_eager_ms
    assert compiled.median_ms == expected_compile_ms
    assert table_rows(Report(targets=[row]))[0][2:4] == [
        f"{expected_eager_ms:.3f}",
        f"{expected_compile_ms:.3f}",
    ]
    assert row.speedup_vs_eager == pytest.approx(eager.median_ms / kernel.median_ms)
    assert row.speedup_vs_compile == pytest.approx(compiled.median_ms / kernel.median_ms)


@pytest.mark.parametrize(
    ("candidate_ms", "cell"),
    [(1.2, "0.83x slower"), (1.02, "0.98x (within noise)"), (0.5, "2.00x")],
)
def test_a_ratio_below_one_beyond_the_noise_reads_slower(tmp_path, candidate_ms, cell):
    result = EvalResult(
        status=Status.ok,
        timings=Timings(eager_beside=_stats(1.0), candidate=_stats(candidate_ms)),
    )
    judge_timing(result, EvalConfig())
    row = TargetReport.from_result("t", result, None)
    assert table_rows(Report(targets=[row]))[0][5] == cell
    assert row.vs_eager is not None and row.vs_eager.slower is cell.endswith("slower")


def test_a_plainly_slower_kernel_reads_slower_even_when_too_few_samples_leave_no_floor(tmp_path):
    one_sample = TimingStats(median_ms=2.3, iqr_ms=0.0, min_ms=2.3, samples=1)
    result = EvalResult(
        status=Status.ok, timings=Timings(eager_beside=_stats(1.0), candidate=one_sample)
    )
    judge_timing(result, EvalConfig())
    assert result.vs_eager is not None and result.vs_eager.noise_floor == float("inf")
    row = TargetReport.from_result("t", result, None)
    assert table_rows(Report(targets=[row]))[0][5] == "0.43x slower"
    assert not row.improved
    # The infinite floor survives report.json (JSON has no number for it).
    again = Report.model_validate_json(Report(targets=[row]).model_dump_json())
    assert again.targets[0].vs_eager == result.vs_eager


def test_the_projects_eval_settings_apply_to_targets_given_on_the_command_line(tmp_path):
    from bot.run import RunOptions, project_eval_config
    from bot.settings import load_settings

    (tmp_path / "pyproject.toml").write_text(
        "[tool.kernelpilot]\n[tool.kernelpilot.eval]\nseeds = 7\ntime_budget_s = 0.2\n"
    )
    (tmp_path / "sub").mkdir()
    options = RunOptions(device="cpu", settings=load_settings(tmp_path / "sub"), time_budget_s=0.5)
    config = project_eval_config(options)
    assert config.seeds == 7 and config.time_budget_s == 0.5  # the flag wins over the file


def test_device_auto_defers_to_the_projects_device_setting(tmp_path):
    import torch

    from bot.cli.options import run_options as _options
    from harness.errors import UserError

    (tmp_path / "pyproject.toml").write_text('[tool.kernelpilot]\ndevice = "cuda"\n')
    if torch.cuda.is_available():
        assert _options("auto", None, tmp_path, None, False, None, start=tmp_path).device == "cuda"
    else:  # the project asks for cuda: no silent fall back to cpu
        with pytest.raises(UserError, match="--device cuda, but PyTorch sees no CUDA GPU"):
            _options("auto", None, tmp_path, None, False, None, start=tmp_path)
    assert _options("cpu", None, tmp_path, None, False, None, start=tmp_path).device == "cpu"


# --- the renderers pinned on fixed records (tests/fixtures/report: what they rendered before
# the report held its EvalResult whole, and must go on rendering) ------------------------------

GOLDEN = Path(__file__).parent / "fixtures" / "report"


def _judged(status: Status = Status.ok, timings: Timings | None = None, **fields) -> EvalResult:
    result = EvalResult(status=status, timings=timings or Timings(), **fields)
    judge_timing(result, EvalConfig())
    return result


def fixed_report() -> Report:
    checks = [
        Check(name="correct", passed=True, detail="4 cases | max err 1e-6"),
        Check(name="baseline_undisturbed", passed=True, detail="fine"),
    ]
    fast = Timings(
        candidate=_stats(0.5), eager_beside=_stats(2.0), eager_alone=_stats(1.8),
        eager_after=_stats(1.9), compiled_beside=_stats(1.5), compiled_alone=_stats(1.6),
    )  # fmt: skip
    slow = Timings(
        candidate=_stats(1.2), eager_beside=_stats(1.0), compile_baseline_error="inductor missing"
    )
    huge = Timings(candidate=_stats(1.0), eager_beside=_stats(30.0), compiled_beside=_stats(25.0))
    tie = Timings(candidate=_stats(1.0), eager_beside=_stats(1.01))
    rows = [
        TargetReport.from_result(
            "m.py:Fast",
            _judged(
                timings=fast,
                device_name="Zen | 3",
                torch_version="2.9",
                max_abs_error=1e-6,
                input_mode="strengthened",
                input_summary="float32[8, 1024]",
                checks=list(checks),
            ),  # fmt: skip
            "out/Fast_kernel.py",
        ),
        TargetReport.from_result(
            "m.py:Slow", _judged(timings=slow, max_abs_error=2e-7, checks=[checks[0]]), None
        ),
        TargetReport.from_result("m.py:Huge", _judged(timings=huge), None),
        TargetReport.from_result("m.py:Tie", _judged(timings=tie), None),
        TargetReport.from_result(
            "m.py:Wrong",
            _judged(
                Status.incorrect,
                reason="outputs differ `x`",
                log="line1\nline2",
                checks=[Check(name="correct", passed=False, detail="max err 3")],
            ),  # fmt: skip
            None,
        ),
        TargetReport.failed("m.py:None", "cpu", TargetStatus.no_candidate, "no kernel proposed"),
        TargetReport.failed("m.py:Err", "cpu", TargetStatus.error, "cannot import m.py"),
        TargetReport.from_result(
            "m.py:Build", _judged(Status.build_error, reason="error: x", log="g++ failed"), None
        ),
        TargetReport.failed("m.py:Weak", "cpu", TargetStatus.weak_spec, "zeros pass"),
    ]
    for row in rows[:3]:
        row.kernel_source = "class ModelNew: ..."
    return Report(targets=rows)


def test_the_terminal_table_markdown_and_junit_render_fixed_records_as_pinned():
    report = fixed_report()
    assert render_terminal(report) + "\n" == (GOLDEN / "terminal.txt").read_text()
    assert render_markdown(report) == (GOLDEN / "report.md").read_text()
    assert render_junit(report) == (GOLDEN / "junit.xml").read_text()


def test_a_new_column_reaches_the_table_markdown_and_junit_by_one_edit(monkeypatch):
    """The report's columns are one list: a value added there shows in every rendering (and
    report.json holds the record whole)."""
    report = fixed_report()
    report.targets[0].result.rel_error = 0.000123  # type: ignore[union-attr]
    column = render.Column(
        "rel err",
        lambda row: f"{row.result.rel_error:.1e}" if row.result and row.result.rel_error else "-",
    )
    monkeypatch.setattr(render, "COLUMNS", [*render.COLUMNS, column])
    assert "rel err" in render_terminal(report) and "1.2e-04" in render_terminal(report)
    assert "rel err" in render_markdown(report) and "1.2e-04" in render_markdown(report)
    assert "rel err: 1.2e-04" in render_junit(report)
    assert report.model_dump()["targets"][0]["result"]["rel_error"] == 0.000123


def test_improved_rows_are_the_verified_faster_ones_not_behind_torch_compile():
    report = fixed_report()
    assert [row.target for row in report.improved()] == ["m.py:Fast", "m.py:Huge"]
    assert report.best_speedup() == pytest.approx(30.0)
    assert [row.target for row in report.targets if row.needs_review] == ["m.py:Huge"]


def test_report_json_round_trips_and_renders_the_same(tmp_path):
    report = fixed_report()
    write_report(report, tmp_path)
    again = Report.model_validate_json((tmp_path / "report.json").read_text())
    assert again == report
    assert render_markdown(again) == (tmp_path / "report.md").read_text()
    row = json.loads((tmp_path / "report.json").read_text())["targets"][0]
    assert row["status"] == "ok" and row["result"]["timings"]["eager"]["median_ms"] == 1.8


def test_every_candidate_status_is_a_target_status():
    assert {status.value for status in Status} <= {status.value for status in TargetStatus}
    assert all(TargetStatus.of(status).value == status.value for status in Status)


def test_a_new_column_shows_in_the_terminal_table_and_markdown(monkeypatch):
    from bot import render

    column = render.Column("inputs", lambda row: row.inputs or "-", text=100)
    monkeypatch.setattr(render, "COLUMNS", [*render.COLUMNS, column])
    report = fixed_report()
    assert render_terminal(report).splitlines()[0].rstrip().endswith("inputs")
    assert "| ` float32[8, 1024] ` |" in render_markdown(report)


def _searched_row() -> TargetReport:
    """A row whose search made an offline attempt (no calls), one priced attempt whose server
    reported its cache, and one on a server that did not, of a model without a price."""
    from agents.trajectory import AttemptSpend, CallSpend, SearchSpend

    attempts = [
        AttemptSpend(node_id="0.1", kind="offline", outcome="ok", spend=CallSpend()),
        AttemptSpend(node_id="0.2", kind="improve", outcome="build_error",
                     spend=CallSpend(calls=2, prompt_tokens=20_000, cached_tokens=12_288,
                                     completion_tokens=1_500, cost_usd=0.0281)),
        AttemptSpend(node_id="0.2.1", kind="debug", outcome="ok",
                     spend=CallSpend(calls=1, prompt_tokens=9_000, cached_tokens=None,
                                     completion_tokens=700, cost_usd=None)),
    ]  # fmt: skip
    total = sum((attempt.spend for attempt in attempts), CallSpend())
    spend = SearchSpend(attempts=attempts, total=total)
    return TargetReport(target="t", device="cpu", status=TargetStatus.ok, spend=spend)


def test_the_report_lists_each_attempts_tokens_cached_tokens_and_cost_and_the_totals():
    report = Report(targets=[_searched_row()])
    markdown = render_markdown(report)
    assert (
        "| attempt | kind | outcome | calls | prompt tokens | cached | completion tokens | cost |"
        in markdown
    )
    assert "| ` 0.1 ` | offline | ok | 0 | - | - | - | - |" in markdown
    assert (
        "| ` 0.2 ` | improve | build\\_error | 2 | 20,000 | 12,288 (61%) | 1,500 | $0.0281 |"
        in markdown
    )
    assert "| ` 0.2.1 ` | debug | ok | 1 | 9,000 | unknown | 700 | unknown |" in markdown
    # A sum over a count that is unknown is unknown: never the smaller known part.
    assert "| **total** |  |  | 3 | 29,000 | unknown | 2,200 | unknown |" in markdown
    terminal = render_terminal(report).splitlines()
    at = terminal.index(next(line for line in terminal if "model calls per attempt" in line))
    assert terminal[at + 1].split() == ["attempt", "kind", "outcome", "calls", "prompt", "tokens",
                                        "cached", "completion", "tokens", "cost"]  # fmt: skip
    assert terminal[at + 3].split() == ["0.2", "improve", "build_error", "2", "20,000", "12,288",
                                        "(61%)", "1,500", "$0.0281"]  # fmt: skip
    assert terminal[-1].split() == ["total", "3", "29,000", "unknown", "2,200", "unknown"]


def test_without_calls_of_a_model_there_is_no_spend_table():
    from agents.trajectory import AttemptSpend, CallSpend, SearchSpend

    offline = SearchSpend(
        attempts=[AttemptSpend(node_id="0.1", kind="offline", outcome="ok", spend=CallSpend())]
    )
    for spend in (None, offline):
        report = Report(targets=[TargetReport(target="t", device="cpu", status=TargetStatus.ok,
                                              spend=spend)])  # fmt: skip
        assert "model calls" not in render_markdown(report).lower()
        assert "model calls" not in render_terminal(report).lower()


def test_the_spend_survives_report_json_and_refuses_what_is_not_a_count():
    row = _searched_row()
    again = TargetReport.model_validate_json(row.model_dump_json())
    assert again.spend == row.spend
    data = json.loads(row.model_dump_json())
    data["spend"]["total"]["cost_usd"] = float("nan")
    with pytest.raises(ValueError):
        TargetReport.model_validate_json(json.dumps(data))
    data["spend"]["total"]["cost_usd"], data["spend"]["total"]["cached_tokens"] = 0.1, -5
    with pytest.raises(ValueError):
        TargetReport.model_validate_json(json.dumps(data))


def test_device_time_stands_beside_call_time_where_they_differ_and_the_report_says_which_judged():
    """cuda (issue 27, goal 4): a small problem's call is mostly launches and host work; the
    report shows each one's device time beside its call time, and that call time judged."""
    from bot.pr.comment import render_comment
    from tests.rows import measured_row
    from tests.test_comment import results

    def row(**device_us: float) -> TargetReport:
        fields = {
            "device": "cuda",
            "device_us": {k.replace("_", "."): v for k, v in device_us.items()},
        }
        return measured_row("m.py:Block", result_fields=fields, device="cuda")

    launch_bound = row(kernelpilot=40.0, eager=310.0, torch_compile=120.0)
    line = render.device_time_line(launch_bound)
    assert line is not None
    # the rows' calls: kernelpilot 0.5 ms, eager 1.0 ms, torch.compile 0.8 ms
    assert "kernelpilot 40.0 µs (call 500 µs)" in line and "eager 310 µs (call 1,000 µs)" in line
    assert "torch.compile 120 µs (call 800 µs)" in line and "judged on call time" in line
    report = Report(targets=[launch_bound])
    for shown in (render_terminal(report), render_markdown(report)):
        assert line in shown
    assert line in render_comment(results(launch_bound))

    close = row(kernelpilot=480.0, eager=960.0, torch_compile=790.0)  # within 10%
    assert render.device_time_line(close) is None
    assert render.device_time_line(row()) is None  # cpu, or no profile: nothing to say


def test_device_time_is_the_kernels_summed_without_the_forwards_own_range():
    """The profile holds user ranges as spans on the device too (the forward's, and
    torch.compile's around each graph call; from the first kernel to the last, gaps included):
    summed with the kernels they would count them twice."""
    from types import SimpleNamespace

    import torch

    from harness.workers.profiling import FORWARD_RANGE, device_total_us

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU
    events = [
        SimpleNamespace(
            key=FORWARD_RANGE, device_type=cuda, device_time_total=3315.6, is_user_annotation=True
        ),
        # torch.compile's graph call: a user annotation of another name, a span on the device
        SimpleNamespace(
            key="## Call CompiledFxGraph fx1 ##",
            device_type=cuda,
            device_time_total=2116.0,
            is_user_annotation=True,
        ),
        SimpleNamespace(key="conv", device_type=cuda, device_time_total=1212.4),
        SimpleNamespace(key="fused_0_fast", device_type=cuda, device_time_total=904.1),
        SimpleNamespace(key="aten::empty", device_type=cpu, device_time_total=50.0),
        SimpleNamespace(key="memset", device_type=cuda, device_time_total=0.0),
    ]
    assert device_total_us(events) == pytest.approx(2116.5)
    assert device_total_us(events[:1]) is None  # no kernel recorded: nothing to say
