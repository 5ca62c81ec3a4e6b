"""``--out`` is checked before any work: a file, a folder that cannot be written and a folder
another run is writing to each stop the command at once (exit 2, naming the option), where
they used to fail with a traceback after the whole run, or overwrite the other run's files."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from bot.cli import main
from tests.conftest import FIXTURES, ROOT

PROBLEM = str(FIXTURES / "scale_problem.py")
CANDIDATE = str(FIXTURES / "isolation_honest.py")


def evaluate(out: Path):
    started = time.monotonic()
    result = CliRunner().invoke(main, ["evaluate", PROBLEM, CANDIDATE, "--device", "cpu",
                                       "--out", str(out)])  # fmt: skip
    return result, time.monotonic() - started


def test_a_file_as_out_stops_before_any_work(tmp_path):
    (tmp_path / "report").write_text("mine")
    result, _ = evaluate(tmp_path / "report")
    assert result.exit_code == 2
    assert (
        "Invalid value for '--out'" in result.output and "is a file, not a folder" in result.output
    )
    assert "computing reference" not in result.output  # nothing ran
    assert (tmp_path / "report").read_text() == "mine"


def test_a_folder_that_cannot_be_made_stops_before_any_work():
    result, _ = evaluate(Path("/proc/kernelpilot-out"))  # /proc takes no new folders
    assert result.exit_code == 2
    assert "cannot write in /proc/kernelpilot-out" in result.output
    assert "Traceback" not in result.output


def test_a_folder_another_run_writes_to_is_refused(tmp_path):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from bot.cli.out_dir import "
         "claim; claim(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()", str(out)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        result, _ = evaluate(out)
        assert result.exit_code == 2
        assert f"another kernelpilot run (pid {holder.pid}) is writing to {out}" in result.output
    finally:
        holder.communicate("")  # the holder ends: its lock goes with it
    from bot.cli.out_dir import claim

    assert claim(out) == out  # free again once the other run is gone
