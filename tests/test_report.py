"""The report's times and speedups agree: a reader can recompute every speedup from the table."""

from __future__ import annotations

import pytest

from bot.report import TargetReport
from harness.config import EvalConfig
from harness.judge.verdict import judge_timing
from harness.records import EvalResult, Status, TimingStats


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
        eager=_stats(beside_ms),
        eager_alone=_stats(alone_ms) if alone_ms else None,
        compiled=_stats(1.5),
        compiled_alone=_stats(compiled_alone_ms) if compiled_alone_ms else None,
        candidate=_stats(1.0),
    )
    judge_timing(result, EvalConfig())
    row = TargetReport.from_result("t", result, None)
    assert row.eager_ms == expected_eager_ms
    assert row.compile_ms == expected_compile_ms
    assert row.eager_beside_ms == beside_ms and row.eager_alone_ms == alone_ms
    assert row.speedup_vs_eager == pytest.approx(row.eager_ms / row.candidate_ms)
    assert row.speedup_vs_compile == pytest.approx(row.compile_ms / row.candidate_ms)


@pytest.mark.parametrize(
    ("candidate_ms", "cell"),
    [(1.2, "0.83x slower"), (1.02, "0.98x (within noise)"), (0.5, "2.00x")],
)
def test_a_ratio_below_one_beyond_the_noise_reads_slower(tmp_path, candidate_ms, cell):
    from bot.render import table_rows
    from bot.report import Report

    result = EvalResult(status=Status.ok, eager=_stats(1.0), candidate=_stats(candidate_ms))
    judge_timing(result, EvalConfig())
    row = TargetReport.from_result("t", result, None)
    assert table_rows(Report(targets=[row]))[0][5] == cell
    assert row.slower_than_eager is cell.endswith("slower")


def test_a_plainly_slower_kernel_reads_slower_even_when_too_few_samples_leave_no_floor(tmp_path):
    from bot.render import table_rows
    from bot.report import Report

    one_sample = TimingStats(median_ms=2.3, iqr_ms=0.0, min_ms=2.3, samples=1)
    result = EvalResult(status=Status.ok, eager=_stats(1.0), candidate=one_sample)
    judge_timing(result, EvalConfig())
    assert result.vs_eager is not None and result.vs_eager.noise_floor == float("inf")
    row = TargetReport.from_result("t", result, None)
    assert table_rows(Report(targets=[row]))[0][5] == "0.43x slower"
    assert not row.improved


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
