"""The user's files as kernelpilot reads them (UTF-8, or a UserError naming the file and the
byte) and the folders it writes (made, or a UserError); workflow commands only inside Actions."""

from __future__ import annotations

import io

import pytest

from bot.actions_io import commands_stopped
from bot.nightly.measure import Tonight, _verified
from bot.nightly.shipped import ShippedKernel
from bot.pr.base_config import review_speedup
from harness.errors import UserError
from harness.files import decode_user_text, output_folder, read_user_text
from harness.problem.load import problem_from_target
from tests.conftest import FIXTURES


def test_utf8_is_read_and_a_byte_order_mark_dropped(tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes("\ufeffx = 'é'\n".encode())
    assert read_user_text(path) == "x = 'é'\n"


def test_a_non_utf8_byte_is_named_by_offset_and_line(tmp_path):
    path = tmp_path / "m.py"
    path.write_bytes(b"x = 1\n# caf\xe9\n")
    with pytest.raises(UserError) as caught:
        read_user_text(path)
    assert caught.value.where == f"{path}, byte 11"
    assert "byte 11 (0xe9, line 2)" in caught.value.what
    assert "save it as UTF-8" in caught.value.fix


@pytest.mark.parametrize(
    ("make", "expected"),
    [(lambda p: None, "module not found"), (lambda p: p.mkdir(), "is a folder, not a file")],
)
def test_a_missing_file_or_a_folder_is_a_user_error(make, expected, tmp_path):
    path = tmp_path / "m.py"
    make(path)
    with pytest.raises(UserError, match=expected):
        read_user_text(path, "module")


def test_decoding_names_where_the_bytes_came_from():
    with pytest.raises(UserError) as caught:
        decode_user_text(b"ab\xff", "pyproject.toml at commit 123")
    assert caught.value.where == "pyproject.toml at commit 123, byte 2"


def test_a_base_commits_non_utf8_pyproject_names_the_byte():
    with pytest.raises(UserError) as caught:
        review_speedup(b"[tool.kernelpilot]\n# \xe9\n", "pyproject.toml at commit abc")
    assert caught.value.where == "pyproject.toml at commit abc, byte 21"


def test_a_nul_byte_in_a_problem_is_a_syntax_error_naming_the_file(tmp_path):
    path = tmp_path / "p.py"
    path.write_bytes(b"x = 1\0\n")
    with pytest.raises(UserError, match="syntax error") as caught:
        problem_from_target(str(path), "cpu", None)
    assert caught.value.where == str(path)


def test_a_shipped_kernel_that_is_not_utf8_fails_its_row(tmp_path):
    """The nightly reports the kernel as failed (kernel_row catches UserError), no traceback."""
    (tmp_path / "m.py").write_text((FIXTURES / "scale_problem.py").read_text())
    (tmp_path / "m_kernelpilot.py").write_bytes(b"# kernelpilot-verified: m.py:Model\n# \xe9\n")
    kernel = ShippedKernel(path="m_kernelpilot.py", module_path="m.py", class_name="Model")
    tonight = Tonight(repo=tmp_path, device="cpu", evaluator=None, rule=None, progress=print,
                      seed=None, base={})  # fmt: skip
    with pytest.raises(UserError, match="not UTF-8") as caught:
        _verified(tonight, kernel)
    assert "m_kernelpilot.py" in caught.value.where


@pytest.mark.parametrize(("environ", "markers"), [({}, False), ({"GITHUB_ACTIONS": "true"}, True)])
def test_workflow_commands_are_printed_only_inside_actions(environ, markers):
    out, err = io.StringIO(), io.StringIO()
    with commands_stopped(out, err, environ=environ):
        out.write("::set-output name=x::1\n")
    assert out.getvalue().startswith("::stop-commands::") is markers
    assert (err.getvalue() != "") is markers


def test_output_folders_are_made_or_refused(tmp_path):
    assert output_folder(tmp_path / "a" / "b").is_dir()
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(UserError, match="is a file, not a folder"):
        output_folder(afile)
    with pytest.raises(UserError, match="is under a file"):
        output_folder(afile / "sub")
