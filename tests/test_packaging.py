"""An installed kernelpilot (the action's own virtual environment, pipx, uv tool) has what a
checkout has: the wheel carries the prompt templates and the example the coder is shown, and
the code finds them there when no checkout is beside it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import agents.data

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_carries_every_prompt_example_candidate_and_native_source(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    [wheel] = tmp_path.glob("kernelpilot-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = "kernelpilot-0.1.0.data/data/share/kernelpilot/"
    wanted = [*ROOT.glob("prompts/*.md"), *ROOT.glob("examples/candidates/*.py"),
              ROOT / "examples/fused_gelu_block.py"]  # fmt: skip
    missing = [p.relative_to(ROOT).as_posix() for p in wanted
               if data + p.relative_to(ROOT).as_posix() not in names]  # fmt: skip
    assert missing == []
    # The stream gate's sources, which the harness builds on first use on cuda.
    native = [p.relative_to(ROOT).as_posix() for p in ROOT.glob("harness/workers/native/*")]
    assert native and not [name for name in native if name not in names]


def test_without_a_checkout_the_installed_copy_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(agents.data, "CHECKOUT", tmp_path / "site-packages")
    monkeypatch.setattr(agents.data, "INSTALLED", tmp_path / "share" / "kernelpilot")
    assert agents.data.data_dir("prompts") == tmp_path / "share" / "kernelpilot" / "prompts"
    monkeypatch.setattr(agents.data, "CHECKOUT", ROOT)
    assert agents.data.data_dir("prompts") == ROOT / "prompts"
