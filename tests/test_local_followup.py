"""``kernelpilot review --write-followup DIR`` at the function level: the follow-up's files (built
by the real ``build_followup`` from a pull request's results) written into a real checkout, and
nothing the user has lost (the whole flow, with the follow-up's test run in a clone, is
tests/test_pr_flow.py's review test)."""

from __future__ import annotations

import pytest

from bot.pr.dropin import runtime_module
from bot.pr.followup import Followup, build_followup
from bot.pr.local_followup import WriteState, write_followup
from harness.errors import UserError
from tests.prflow import Project
from tests.test_publish import EXFILTRATING, honest

FILES = ["models/act_verified_kernelpilot.py", "models/act_kernelpilot.py",
         "tests/test_act_kernelpilot.py", f"models/{runtime_module()[0]}.py"]  # fmt: skip


@pytest.fixture
def project(tmp_path) -> Project:
    (tmp_path / "checkout").mkdir()
    return Project(tmp_path / "checkout")


def followup_of(project: Project, **kwargs) -> Followup:
    results = honest(project, **kwargs)
    followup = build_followup(results, results.test_dir)
    assert followup is not None
    return followup


def test_the_files_go_at_their_repository_paths_and_a_second_write_changes_nothing(project):
    followup = followup_of(project)
    written = write_followup(followup, project.root, force=False)
    assert [(file.path, file.state) for file in written] == [
        (path, WriteState.written) for path in FILES
    ]
    for file in followup.files:
        assert (project.root / file.path).read_text() == file.content
    again = write_followup(followup, project.root, force=False)
    assert {file.state for file in again} == {WriteState.unchanged}


def test_a_file_with_other_content_stops_the_write_before_anything_is_written(project):
    followup = followup_of(project)
    write_followup(followup, project.root, force=False)
    edited, removed = project.root / FILES[1], project.root / FILES[2]
    edited.write_text("# my own edits\n")
    removed.unlink()
    with pytest.raises(
        UserError, match="models/act_kernelpilot.py is there with other content"
    ) as err:
        write_followup(followup, project.root, force=False)
    assert "--force" in err.value.fix
    assert edited.read_text() == "# my own edits\n" and not removed.exists()  # nothing written

    states = write_followup(followup, project.root, force=True)
    assert [file.state for file in states] == [
        WriteState.unchanged, WriteState.replaced, WriteState.written, WriteState.unchanged
    ]  # fmt: skip
    assert edited.read_text() == followup.files[1].content


def test_a_link_on_the_way_out_of_the_folder_is_refused_even_with_force(tmp_path, project):
    folder, elsewhere = tmp_path / "try", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "models").symlink_to(elsewhere)
    with pytest.raises(UserError, match="outside"):
        write_followup(followup_of(project), folder, force=True)
    assert list(elsewhere.iterdir()) == [] and not (folder / "tests").exists()


def test_a_kernel_that_fails_the_gate_is_not_written(tmp_path, project):
    followup = followup_of(project, kernel=EXFILTRATING)
    with pytest.raises(UserError, match="fails the gate"):
        write_followup(followup, tmp_path / "try", force=False)
    assert not (tmp_path / "try").exists()


def test_files_written_into_a_new_folder_are_made_with_it(tmp_path, project):
    target = tmp_path / "new" / "folder"
    write_followup(followup_of(project), target, force=False)
    assert sorted(str(p.relative_to(target)) for p in target.rglob("*.py")) == sorted(FILES)
