"""Bad input: each says what is wrong, where and what to do, exits non-zero, no traceback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from bot.cli import main
from tests.conftest import FIXTURES, ROOT

BAD = FIXTURES / "bad"
PROBLEM = str(FIXTURES / "scale_problem.py")
FAST = ["--no-compile-baseline", "--time-budget", "0.1", "--device", "cpu"]
HONEST = str(FIXTURES / "isolation_honest.py")


def run(*args: str, env: dict | None = None):
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["optimize", "no/such/file.py"], "file not found"),
        (["optimize", str(BAD / "syntax_error.py")], "syntax error"),
        (["optimize", str(BAD / "no_module.py")], "class 'Model' not found"),
        (["optimize", f"{PROBLEM}:Missing"], "class 'Missing' not found"),
        (["evaluate", PROBLEM, "no/such/candidate.py", *FAST], "candidate file not found"),
        (
            ["audit", str(BAD / "non_tensor_inputs.py"), "--device", "cpu"],
            "not a tensor or a plain value",
        ),
        (["audit", str(BAD / "raising_inputs.py"), "--device", "cpu"], "dataset missing"),
        (["audit", str(BAD / "nonfinite_reference.py"), "--device", "cpu"], "holds NaN or Inf"),
        # It was the candidate's runtime_error: the harness's guard fill crashed on complex64.
        (["evaluate", str(BAD / "complex_inputs.py"), HONEST, *FAST], "input 0 is complex64"),
    ],
)
def test_user_errors(args, expected):
    code, output = run(*args)
    assert code == 2, output
    assert expected in output
    assert "fix:" in output or "where:" in output
    assert "Traceback" not in output


def test_verbose_shows_the_traceback():
    code, output = run("audit", str(BAD / "raising_inputs.py"), "--device", "cpu", "--verbose")
    assert code == 2 and "Traceback" in output


def test_cuda_without_gpu_is_a_clear_error():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, output = run(
        "evaluate", PROBLEM, str(FIXTURES / "isolation_honest.py"), "--device", "cuda"
    )
    assert code == 2 and "no CUDA GPU" in output and "--device cpu" in output


def test_missing_compiler_is_a_clear_error():
    code, output = run(
        "evaluate",
        PROBLEM,
        str(FIXTURES / "isolation_honest.py"),
        "--device",
        "cpu",
        env={"CXX": "no-such-compiler"},
    )
    assert code == 2 and "no C++ compiler" in output


@pytest.mark.parametrize(
    ("candidate", "status", "check", "text"),
    [
        ("no_modelnew.py", "rejected", "static_gate", "defines no top-level class ModelNew"),
        ("wrong_constructor.py", "runtime_error", "constructs", "width"),
        ("wrong_state_dict.py", "runtime_error", "state_dict_strict", "extra"),
    ],
)
def test_bad_candidates_are_verdicts(candidate, status, check, text, tmp_path):
    code, output = run("evaluate", PROBLEM, str(BAD / candidate), *FAST, "--out", str(tmp_path))
    assert code == 1, output
    row = json.loads((tmp_path / "report.json").read_text())["targets"][0]
    assert row["status"] == status
    failed = [c for c in row["result"]["checks"] if not c["passed"]]
    assert any(c["name"] == check for c in failed), failed
    assert text in row["reason"]


def test_optimize_keeps_measured_results_when_a_later_target_fails(tmp_path):
    """The first target is reported even though the second one's inputs raise."""
    code, output = run(
        "optimize",
        str(ROOT / "examples" / "swiglu.py"),
        str(BAD / "raising_inputs.py"),
        *FAST,
        "--out",
        str(tmp_path),
    )
    assert code == 1
    rows = json.loads((tmp_path / "report.json").read_text())["targets"]
    assert [row["status"] for row in rows][1] == "error"
    assert rows[0]["status"] in ("ok", "no_candidate"), rows[0]
    assert "dataset missing" in rows[1]["reason"]


@pytest.mark.parametrize("command", ["optimize", "github", "nightly", "history", "review"])
def test_python_dash_m_bot_cli_has_every_command(command):
    """``python -m bot.cli`` (how the GPU scripts and a user without the entry point run it)
    imports cleanly and knows the commands other modules register."""
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "bot.cli", command, "--help"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert "Usage:" in completed.stdout


# --- issue 23: every failure ends cleanly ------------------------------------------------------
# The user's files are UTF-8: one that is not is named, with the byte.

PROBLEM_TEXT = (FIXTURES / "scale_problem.py").read_text().replace('"""A small', '"""Café: a small')


def clean_error(code: int, output: str, *expected: str) -> None:
    assert code == 2, output
    assert "Traceback" not in output and "::" not in output, output
    for text in expected:
        assert text in output, output


def latin1(path, text: str = PROBLEM_TEXT):
    path.write_bytes(text.encode("latin-1"))
    return path


def test_a_non_utf8_problem_names_the_file_and_byte(tmp_path):
    problem = latin1(tmp_path / "latin.py")
    offset = PROBLEM_TEXT.encode("latin-1").index(b"\xe9")
    for command in ("audit", "optimize"):
        code, output = run(command, str(problem), "--device", "cpu")
        clean_error(code, output, str(problem), f"byte {offset}", "save it as UTF-8")


def test_a_non_utf8_trajectory_to_resume_names_the_byte(tmp_path):
    trajectory = tmp_path / "trajectory-x.json"
    trajectory.write_bytes(b"\xff\xfe{}")
    code, output = run("optimize", "--resume", str(trajectory), "--device", "cpu")
    clean_error(code, output, str(trajectory), "byte 0", "save it as UTF-8")


def test_a_non_utf8_pyproject_names_the_file(tmp_path, monkeypatch):
    text = '[tool.kernelpilot]\n# déjà\ndevice = "cpu"\n'
    latin1(tmp_path / "pyproject.toml", text)
    monkeypatch.chdir(tmp_path)
    code, output = run("optimize")
    offset = text.encode("latin-1").index(b"\xe9")
    clean_error(code, output, "pyproject.toml", f"byte {offset}", "save it as UTF-8")


def test_a_utf8_problem_with_a_byte_order_mark_loads(tmp_path):
    problem = tmp_path / "bom.py"
    problem.write_bytes(b"\xef\xbb\xbf" + PROBLEM_TEXT.encode())
    code, output = run("audit", str(problem), "--device", "cpu", "--seed", "1")
    assert code in (0, 1) and "syntax error" not in output, output


def test_a_non_utf8_candidate_names_the_byte(tmp_path):
    candidate = latin1(
        tmp_path / "cand.py", (FIXTURES / "isolation_honest.py").read_text() + "# é\n"
    )
    code, output = run("evaluate", PROBLEM, str(candidate), *FAST)
    clean_error(code, output, str(candidate), "save it as UTF-8")


def test_a_folder_as_the_candidate_says_so(tmp_path):
    code, output = run("evaluate", PROBLEM, str(tmp_path), *FAST)
    clean_error(code, output, f"candidate file {tmp_path} is a folder")


def test_a_non_utf8_reply_script_names_the_byte(tmp_path):
    script = tmp_path / "replies.json"
    script.write_bytes(b"[\xff]")
    code, output = run("optimize", PROBLEM, *FAST, "--llm", "scripted", "--script", str(script),
                       "--out", str(tmp_path / "out"))  # fmt: skip
    clean_error(code, output, str(script), "byte 1", "save it as UTF-8")


def test_a_missing_input_factory_file_is_named(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[[tool.kernelpilot.targets]]\nmodule = "m.py:Model"\n'
        'inputs = "gone.py:make"\n'
    )
    (tmp_path / "m.py").write_text(PROBLEM_TEXT)
    code, output = run("audit", f"{tmp_path / 'm.py'}:Model", "--device", "cpu")
    clean_error(code, output, "input factory 'gone.py:make' not found", "pyproject.toml")


# A folder given where a file belongs.


@pytest.mark.parametrize("command", [["audit"], ["evaluate"], ["optimize"]])
def test_a_folder_as_the_problem_says_what_to_pass(command, tmp_path):
    args = [*command, str(tmp_path)]
    if command == ["evaluate"]:
        args.append(str(FIXTURES / "isolation_honest.py"))
    code, output = run(*args, "--device", "cpu")
    clean_error(code, output, "is a folder", "get_inputs()", "path.py:ClassName")
    assert "not found" not in output


def test_optimize_a_project_folder_points_at_its_configured_targets(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.kernelpilot]\n")
    code, output = run("optimize", str(tmp_path), "--device", "cpu")
    clean_error(code, output, "is a folder", "with no target", f"cd {tmp_path}")


def test_a_configured_module_that_is_a_folder_names_the_entry(tmp_path, monkeypatch):
    (tmp_path / "models").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[tool.kernelpilot]\n[[tool.kernelpilot.targets]]\nmodule = "models:Act"\n'
    )
    monkeypatch.chdir(tmp_path)
    code, output = run("optimize", "--device", "cpu")
    clean_error(code, output, "is a folder", "module = 'models:Act'", "path/to/file.py:ClassName")


# Outside git, and workflow commands outside GitHub Actions.

NO_GIT = {"GIT_CEILING_DIRECTORIES": "/", "GITHUB_ACTIONS": None}  # tmp_path is in no repository


def test_nightly_outside_git_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = run("nightly", "--device", "cpu", "--history-dir", "h", env=NO_GIT)
    clean_error(code, output, "not in a git repository: the nightly", "--repo")


def test_nightly_in_a_repository_without_commits_says_so(tmp_path, monkeypatch):
    from tests.gitrepo import git

    git(tmp_path, "init", "-q")
    monkeypatch.chdir(tmp_path)
    code, output = run("nightly", "--device", "cpu", "--history-dir", "h", env=NO_GIT)
    clean_error(code, output, "no commit yet")


def test_nightly_measure_outside_git_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {**NO_GIT, "GITHUB_REPOSITORY": "owner/name"}
    code, output = run("github", "nightly-measure", "--device", "cpu", "--out", "o", env=env)
    clean_error(code, output, "not in a git repository")


def test_github_measure_outside_git_says_so(tmp_path, monkeypatch):
    (tmp_path / "event.json").write_text('{"inputs": {}, "ref": "refs/heads/main"}')
    monkeypatch.chdir(tmp_path)
    env = {**NO_GIT, "GITHUB_EVENT_NAME": "workflow_dispatch", "GITHUB_REPOSITORY": "o/n",
           "GITHUB_EVENT_PATH": str(tmp_path / "event.json")}  # fmt: skip
    code, output = run("github", "measure", "--device", "cpu", "--out", "o", env=env)
    clean_error(code, output, "not in a git repository: github measure", "actions/checkout")


def test_history_outside_git_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, output = run("history", "m.py:A", env=NO_GIT)
    clean_error(code, output, "not in a git repository", "--history-dir")


@pytest.mark.parametrize("command", [["github", "gate"], ["github", "publish"]])
def test_workflow_commands_only_inside_actions(command):
    code, output = run(*command, env={"GITHUB_ACTIONS": None, "GITHUB_EVENT_NAME": None})
    clean_error(code, output, "GITHUB_EVENT_NAME is not set")
    code, output = run(*command, env={"GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": None})
    assert code == 2 and "::stop-commands::" in output, output


# Option values.


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["evaluate", PROBLEM, str(FIXTURES / "isolation_honest.py"), "--device", "cpu",
          "--time-budget", "nan"], "--time-budget"),
        (["optimize", PROBLEM, "--device", "cpu", "--max-time", "nan"], "max_seconds"),
        (["review", "--base", "main", "--max-cost", "0"], "'--max-cost'"),
        (["review", "--base", "", "--device", "cpu"], "'--base': must not be empty"),
        (["nightly", "--branch", ""], "'--branch': must not be empty"),
        (["history", " "], "'BENCHMARK': must not be empty"),
        (["github", "gate", "--approval-label", ""], "'--approval-label': must not be empty"),
    ],
)  # fmt: skip
def test_bad_option_values_are_clear_errors(args, expected):
    code, output = run(*args, env={"GITHUB_ACTIONS": None})
    clean_error(code, output, expected)
    assert "reference run failed" not in output


@pytest.mark.parametrize(
    "command",
    [["optimize", PROBLEM, *FAST, "--llm", "offline"], ["nightly", "--device", "cpu"],
     ["github", "measure", "--device", "cpu"], ["github", "nightly-measure", "--device", "cpu"]],
)  # fmt: skip
def test_an_out_folder_that_is_a_file_is_a_clear_error(command, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("")
    code, output = run(*command, "--out", str(afile), env={"GITHUB_ACTIONS": None})
    clean_error(code, output, "afile")
    assert "is a file" in output, output


def test_history_plot_into_a_new_folder(tmp_path):
    (tmp_path / "h" / "history").mkdir(parents=True)
    (tmp_path / "h" / "history" / "target_m.py_A.jsonl").write_text("")
    plot = tmp_path / "new" / "sub" / "a.png"
    code, output = run("history", "m.py:A", "--history-dir", str(tmp_path / "h"), "--plot",
                       str(plot))  # fmt: skip
    assert code == 0 and plot.is_file(), output


def test_a_search_time_of_zero_is_refused(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.kernelpilot.search]\nmax_seconds = 0\n")
    monkeypatch.chdir(tmp_path)
    code, output = run("optimize", PROBLEM, "--device", "cpu")
    clean_error(code, output, "tool.kernelpilot.search.max_seconds", "greater than 0")


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["evaluate", PROBLEM, str(FIXTURES / "isolation_honest.py"), "--time-budget", "0"],
         "--time-budget"),
        (["optimize", PROBLEM, "--max-cost", "0"], "--max-cost"),
        (["optimize", PROBLEM, "--max-time", "-1"], "--max-time"),
        (["optimize", PROBLEM, "--gpus", "-1"], "--gpus"),
    ],
)  # fmt: skip
def test_zero_or_negative_budgets_are_refused_by_click(args, option):
    code, output = run(*args, "--device", "cpu")
    assert code == 2 and f"Invalid value for '{option}'" in output, output


# kernelpilot review's folders: nothing written into the repository unless asked.


def reviewed_repository(root):
    from tests.gitrepo import commit, init

    root.mkdir()
    init(root)
    commit(root, {".gitignore": "ignored/\n", "README.md": "x\n"}, "base")
    return root


def test_review_refuses_an_out_folder_inside_the_work_tree_unless_git_ignores_it(tmp_path):
    repo = reviewed_repository(tmp_path / "repo")
    code, output = run("review", "--base", "HEAD", "--device", "cpu", "--out",
                       str(repo / "reports"), "--repo", str(repo))  # fmt: skip
    clean_error(code, output, "'--out'", "inside the repository's work tree", ".gitignore")
    assert not (repo / "reports").exists()
    # An ignored folder is taken (the run then stops at the unknown ref, after --out was made).
    code, output = run("review", "--base", "nosuch", "--device", "cpu", "--repo", str(repo),
                       "--out", str(repo / "ignored" / "reports"))  # fmt: skip
    clean_error(code, output, "unknown base ref 'nosuch'")
    assert (repo / "ignored" / "reports").is_dir()


def test_review_writes_under_the_cache_by_default_and_leaves_the_repository_clean(
    tmp_path, monkeypatch
):
    from bot.cli.out_dir import review_folder
    from tests.gitrepo import git

    repo = reviewed_repository(tmp_path / "repo")
    monkeypatch.setenv("KERNELPILOT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(repo)
    code, output = run("review", "--base", "HEAD", "--device", "cpu", "--write-followup", ".")
    assert code == 0, output
    folder = review_folder(repo)
    assert folder.is_relative_to(tmp_path / "cache") and (folder / "results.json").is_file()
    assert f"the reports are in {folder}" in output
    assert "no module got a faster kernel, no file to write" in output
    assert git(repo, "status", "--porcelain", "--ignored") == ""
