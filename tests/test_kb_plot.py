"""The KernelBench sweep's plot (issue 27, goal 6): the ok candidates' speedups, sorted, with
their geometric means, drawn from the sweep's own record through its command line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bench.kb_plot import geomean, plotted
from bench.kb_sweep import cli
from bench.kb_sweep_rows import SweepRow


def row(name: str, status: str | None, vs_compile: float | None, vs_eager: float | None):
    return SweepRow(name=f"level2/{name}", device="cuda", published_size=True,
                    reference_status="ok", candidate_status=status, candidate_kind="offline",
                    speedup_vs_compile=vs_compile, speedup_vs_eager=vs_eager)  # fmt: skip


ROWS = [
    row("fast", "ok", 2.0, 4.0),
    row("slow", "ok", 0.5, 1.5),
    row("wrong", "incorrect", None, None),
    row("even", "ok", 1.0, 2.0),
]


def test_only_ok_candidates_are_plotted_slowest_first_with_their_geometric_means():
    assert [r.name for r in plotted(ROWS)] == ["level2/slow", "level2/even", "level2/fast"]
    assert geomean([0.5, 1.0, 2.0]) == pytest.approx(1.0)
    assert geomean([]) is None


def test_the_command_draws_the_record_it_is_given(tmp_path):
    record = tmp_path / "sweep.json"
    record.write_text(json.dumps([r.model_dump() for r in ROWS]))
    png = tmp_path / "speedups.png"
    result = CliRunner().invoke(cli, ["--table", str(record), "--plot", str(png)])
    assert result.exit_code == 0, result.output
    assert "plotted 3 problems" in result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    nothing = tmp_path / "none.json"
    nothing.write_text(json.dumps([ROWS[2].model_dump()]))
    result = CliRunner().invoke(cli, ["--table", str(nothing), "--plot", str(tmp_path / "x.png")])
    assert "no ok candidate to plot" in result.output and not (tmp_path / "x.png").exists()
