"""The workflows and action.yml: linted (actionlint, zizmor), checked for the security rules of
DESIGN.md section 5, and run for real with act against the fake GitHub server.

Users copy examples/workflows/; .github/workflows/ runs the same flows on this repository with
the action taken from a trusted checkout (test_project_workflows_are_the_examples keeps them in
step). The act tests run the example workflows, with kernelpilot's action mapped onto this
working tree and the third-party actions onto stand-ins (tests/act/runner.py says why).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.act.runner import ActRunner, copy_kernelpilot, git
from tests.prflow import CHANGED, MODULE, PROJECT

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ACTION = ROOT / "action.yml"
PROJECT_WORKFLOWS = sorted((ROOT / ".github/workflows").glob("*.yml"))
EXAMPLES = sorted((ROOT / "examples/workflows").glob("*.yml"))
WORKFLOWS = PROJECT_WORKFLOWS + EXAMPLES
KERNELPILOT_WORKFLOWS = [w for w in WORKFLOWS if w.name.startswith("kernelpilot-")]
# The workflows whose jobs run code that is not the default branch's (a PR's, a dispatched ref's).
MEASURING_WORKFLOWS = [w for w in KERNELPILOT_WORKFLOWS if "nightly" not in w.name]
NIGHTLY_WORKFLOWS = [w for w in KERNELPILOT_WORKFLOWS if "nightly" in w.name]
PLACEHOLDER = "your-org/kernelpilot@" + "0" * 40
TRUSTED_CHECKOUT_PATH = ".kernelpilot"
APPROVAL_LABEL = "kernelpilot:approved"
MARKER = "<!-- kernelpilot:comment -->"
PINNED = re.compile(r"^[\w.-]+/[\w.-]+(/[\w./-]+)?@[0-9a-f]{40}$")


def tool(name: str) -> str:
    """A linter installed by the dev extras (beside this python), else on PATH."""
    found = BIN / name if (BIN / name).exists() else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return str(found)


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def steps(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(job id, step) of a workflow, or ("action", step) of a composite action."""
    if "runs" in document:
        for step in document["runs"]["steps"]:
            yield "action", step
        return
    for job_id, job in document["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def kernelpilot_mode(step: dict[str, Any]) -> str | None:
    uses = step.get("uses", "")
    if uses == f"./{TRUSTED_CHECKOUT_PATH}" or uses.startswith("your-org/kernelpilot@"):
        return step["with"]["mode"]
    return None


def jobs_running(document: dict[str, Any], mode: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (job_id, job)
        for job_id, job in document["jobs"].items()
        if any(kernelpilot_mode(step) == mode for step in job.get("steps", []))
    ]


def is_checkout(step: dict[str, Any]) -> bool:
    return step.get("uses", "").startswith("actions/checkout@")


# -- linters ---------------------------------------------------------------------------------


def test_actionlint_passes_every_workflow():
    shellcheck = BIN / "shellcheck" if (BIN / "shellcheck").exists() else shutil.which("shellcheck")
    done = subprocess.run(
        [tool("actionlint"), "-oneline", "-shellcheck", str(shellcheck or ""), "-pyflakes", "",
         *map(str, WORKFLOWS)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_auditor_finds_nothing_the_threat_model_does_not_explain():
    """zizmor's offline audits with its auditor persona (every finding, the pedantic ones
    too); files named one by one (given a folder, zizmor looks for .github/workflows inside it
    and would skip examples/workflows). The findings silenced inline are the reviewed ones
    (test_every_zizmor_suppression_is_reviewed)."""
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--no-config", "--persona", "auditor", "--format", "json",
         str(ACTION), *map(str, WORKFLOWS)],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == []


# Each finding silenced inline, the line it may sit on, and why (docs/security.md says more):
REVIEWED_IGNORES = {
    # pull_request_target, used the way GitHub documents as safe for it: PR code only in a
    # read-only job after a maintainer's label on the SHA then; writes in a job that never
    # checks it out (the structure tests below check that shape).
    "dangerous-triggers": re.compile(r"^\s*# zizmor: ignore\[dangerous-triggers\] .+"),
    # The GPU is on the user's own machine; one label per trust level, and a fork's code only
    # on an ephemeral runner (bot/pr/runner_trust.py).
    "self-hosted-runner": re.compile(
        r"^\s*runs-on: \[self-hosted, gpu, kernelpilot-(pr|nightly)\] "
        r"# zizmor: ignore\[self-hosted-runner\] .+"
    ),
    # The LLM key alone, passed to the measure step's process only
    # (test_the_llm_key_reaches_the_measure_step_only).
    "secrets-outside-env": re.compile(
        r"^\s*openai-api-key: \$\{\{ secrets\.OPENAI_API_KEY \}\} "
        r"# zizmor: ignore\[secrets-outside-env\] .+"
    ),
    # kernelpilot's own trusted checkout (this run's commit: the base branch's under
    # pull_request_target), taken right before; `$/` for a repository's root action is new,
    # and act cannot run it.
    "self-repository": re.compile(
        r"^\s*(- )?uses: \./\.kernelpilot # zizmor: ignore\[self-repository\] .+"
    ),
}


def test_every_zizmor_suppression_is_reviewed():
    """An inline ignore is one of REVIEWED_IGNORES, on the line it is reviewed for, and says
    why, pointing at the threat model (docs/security.md). A new one must be reviewed and added
    there."""
    found = set()
    for path in [ACTION, *WORKFLOWS]:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            match = re.search(r"zizmor: ignore\[([\w-]+)\]", line)
            if not match:
                continue
            rule = match[1]
            where = f"{path.relative_to(ROOT)}:{number + 1}: {line.strip()}"
            assert rule in REVIEWED_IGNORES and REVIEWED_IGNORES[rule].match(line), where
            if rule == "dangerous-triggers":
                assert lines[number + 1].strip() == "pull_request_target:", where
            else:
                assert "docs/security.md" in line, where
            found.add(rule)
    assert found == set(REVIEWED_IGNORES)


def test_action_scripts_pass_shellcheck(tmp_path):
    """actionlint checks the workflows' scripts; action.yml's are checked here the same way."""
    shellcheck = tool("shellcheck")
    for index, (_, step) in enumerate(steps(load(ACTION))):
        script = tmp_path / f"step{index}.sh"
        script.write_text("#!/usr/bin/env bash\nset -eo pipefail\n" + step["run"])
        done = subprocess.run(
            [shellcheck, "--severity=style", str(script)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"step {step.get('name')}:\n{done.stdout}"


# -- structure ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [ACTION, *WORKFLOWS], ids=lambda p: str(p.relative_to(ROOT)))
def test_uses_are_pinned_and_runs_hold_no_expression(path):
    """Third-party actions by full commit SHA (a `# vX.Y.Z` comment says which release), local
    ones by path; no `${{ }}` inside a script, where its text would become shell code."""
    text = path.read_text()
    for match in re.finditer(r"^\s*(?:- )?uses:\s*(\S+)(.*)$", text, re.MULTILINE):
        uses, rest = match.groups()
        if uses.startswith("./"):
            continue
        assert PINNED.match(uses), f"{path.name}: {uses} is not pinned to a commit SHA"
        if uses.split("@")[0] != PLACEHOLDER.split("@")[0]:
            assert re.search(r"#\s*v\d+\.\d+\.\d+", rest), f"{path.name}: {uses} names no version"
    for job_id, step in steps(load(path)):
        assert "${{" not in step.get("run", ""), f"{path.name}: {job_id}: expression in run:"


def test_action_passes_inputs_through_env_and_keeps_the_token_from_measure():
    action = load(ACTION)
    assert {"mode", "github-token", "openai-api-key", "openai-base-url", "model", "budget",
            "max-cost", "device", "approval-label", "targets", "python", "results",
            "open-pr", "data-branch", "nightly-issue", "ephemeral-runner"} <= set(action["inputs"])  # fmt: skip
    assert {"improved", "best-speedup", "followup-pr-url", "run", "sha", "matrix"} <= set(
        action["outputs"]
    )
    named = {step.get("id"): step for _, step in steps(action)}
    for measuring in ("measure", "nightly-measure"):  # the steps that run the repository's code
        assert "github-token" not in json.dumps(named[measuring])
        assert "GITHUB_TOKEN" not in json.dumps(named[measuring].get("env", {}))
    assert (
        named["measure"]["env"]["KERNELPILOT_EPHEMERAL_RUNNER"] == "${{ inputs.ephemeral-runner }}"
    )
    for mode in ("gate", "plan", "measure", "merge", "publish", "nightly-measure",
                 "nightly-publish"):  # fmt: skip
        script = named[mode]["run"]
        assert "::stop-commands::$token" in script and 'echo "::$token::"' in script
        assert f'kernelpilot" github {mode}' in script
    install = named["install"]["run"]
    assert "--system-site-packages" in install and "$RUNNER_TEMP" in install


def _mentions_llm_key(value: Any) -> bool:
    text = json.dumps(value)
    return "OPENAI_API_KEY" in text or "openai-api-key" in text


def test_the_llm_key_reaches_the_measure_step_only():
    """The LLM key is in the environment of one process: kernelpilot's measure step, which
    calls the LLM. Not in a workflow's or a job's env (every step would get it), not in any
    other step (checkout, artifacts, gate, publish, the nightly's, the install step that runs
    pip), and in action.yml only in the measure step's env."""
    for path in WORKFLOWS:
        workflow = load(path)
        assert not _mentions_llm_key(workflow.get("env", {})), path.name
        for job_id, job in workflow["jobs"].items():
            assert not _mentions_llm_key(job.get("env", {})), f"{path.name}: {job_id}"
            assert not _mentions_llm_key(job.get("defaults", {})), f"{path.name}: {job_id}"
            for step in job["steps"]:
                if kernelpilot_mode(step) == "measure":
                    assert not _mentions_llm_key(step.get("env", {})), f"{path.name}: {job_id}"
                    assert step["with"]["openai-api-key"] == "${{ secrets.OPENAI_API_KEY }}"
                else:
                    assert not _mentions_llm_key(step), f"{path.name}: {job_id}: {step}"
    action = load(ACTION)
    assert not _mentions_llm_key(action["runs"].get("env", {}))
    holders = [step.get("id") for _, step in steps(action) if _mentions_llm_key(step)]
    assert holders == ["measure"]
    [measure] = [step for _, step in steps(action) if step.get("id") == "measure"]
    assert measure["env"]["OPENAI_API_KEY"] == "${{ inputs.openai-api-key }}"
    assert measure["if"] == "inputs.mode == 'measure'"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_least_privilege_and_one_run_at_a_time(path):
    workflow = load(path)
    assert workflow["permissions"] == {}
    assert "concurrency" in workflow
    for job_id, job in workflow["jobs"].items():
        assert "permissions" in job, f"{path.name}: job {job_id} has no permissions of its own"
        for _, step in steps({"jobs": {job_id: job}}):
            if is_checkout(step):
                assert step["with"]["persist-credentials"] is False, f"{path.name}: {job_id}"


PR_RUNNER = ["self-hosted", "gpu", "kernelpilot-pr"]
NIGHTLY_RUNNER = ["self-hosted", "gpu", "kernelpilot-nightly"]


@pytest.mark.parametrize("path", KERNELPILOT_WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_pull_requests_and_the_nightly_use_runners_of_their_own(path):
    """A runner that ran a pull request's (or a manual run's) code never runs the nightly, so
    nothing such code leaves behind meets the nightly's jobs; jobs that run no kernel take no
    GPU runner at all."""
    workflow = load(path)
    for job_id, job in workflow["jobs"].items():
        modes = {kernelpilot_mode(step) for step in job["steps"]} - {None}
        if modes == {"measure"}:
            assert job["runs-on"] == PR_RUNNER, f"{path.name}: {job_id}"
        elif modes == {"nightly-measure"}:
            assert job["runs-on"] == NIGHTLY_RUNNER, f"{path.name}: {job_id}"
        else:
            assert "self-hosted" not in json.dumps(job["runs-on"]), f"{path.name}: {job_id}"


@pytest.mark.parametrize("path", MEASURING_WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_job_that_runs_pr_code_can_only_read(path):
    workflow = load(path)
    [(job_id, job)] = jobs_running(workflow, "measure")
    assert job["permissions"] == {"contents": "read"}, job_id
    text = json.dumps(job)
    assert "github.token" not in text and "GITHUB_TOKEN" not in text
    assert re.findall(r"secrets\.(\w+)", text) == ["OPENAI_API_KEY"]
    [step] = [s for s in job["steps"] if kernelpilot_mode(s) == "measure"]
    if path.name.endswith(
        "-pr.yml"
    ):  # declared, never assumed: a fork's PR is refused until it is true
        assert step["with"]["ephemeral-runner"] is False


@pytest.mark.parametrize("path", NIGHTLY_WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_nightly_measures_without_a_token_and_publishes_without_its_code(path):
    """The job that runs the default branch's code (modules, input factories, shipped kernels)
    can only read and gets no token or secret; the job that writes the history and the issue
    runs after it, checks out none of the repository (only kernelpilot's own trusted copy, in
    the project's workflow) and gets measure's results as an artifact."""
    workflow = load(path)
    assert set(workflow["on"]) == {"schedule"}  # the default branch's code, never a PR's
    [(measure_id, measure)] = jobs_running(workflow, "nightly-measure")
    [(publish_id, publish)] = jobs_running(workflow, "nightly-publish")
    assert measure["permissions"] == {"contents": "read"}, measure_id
    text = json.dumps(measure)
    assert "github.token" not in text and "github-token" not in text and "secrets." not in text
    [checkout] = [s for s in measure["steps"] if is_checkout(s) and s["with"]["path"] == "repo"]
    assert "ref" not in checkout["with"] and checkout["with"]["fetch-depth"] == 0
    [upload] = [s for s in measure["steps"] if "upload-artifact" in s.get("uses", "")]
    assert upload["if"] == "${{ !cancelled() }}"
    assert publish["needs"] == measure_id
    assert publish["permissions"] == {"contents": "write", "issues": "write"}, publish_id
    assert publish["runs-on"] == "ubuntu-latest"
    for step in publish["steps"]:
        if is_checkout(step):
            assert step["with"] == {"path": TRUSTED_CHECKOUT_PATH, "persist-credentials": False}
    [download] = [s for s in publish["steps"] if "download-artifact" in s.get("uses", "")]
    assert download["with"]["name"] == upload["with"]["name"]
    [step] = [s for s in publish["steps"] if kernelpilot_mode(s) == "nightly-publish"]
    assert step["with"]["github-token"] == "${{ github.token }}"
    assert "secrets." not in json.dumps(publish)


@pytest.mark.parametrize("path", KERNELPILOT_WORKFLOWS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_job_that_writes_never_checks_out_the_pull_request(path):
    workflow = load(path)
    writers = [*jobs_running(workflow, "publish"), *jobs_running(workflow, "gate"),
               *jobs_running(workflow, "nightly-publish")]  # fmt: skip
    for job_id, job in writers:
        for _, step in steps({"jobs": {job_id: job}}):
            if is_checkout(step):  # only the project's own trusted copy of kernelpilot
                assert step["with"] == {"path": TRUSTED_CHECKOUT_PATH, "persist-credentials": False}
        text = json.dumps(job)
        assert "pull_request.head" not in text and "needs.gate.outputs.sha" not in text


def test_pull_request_flow_gates_and_skips_the_bot():
    for path in (
        ROOT / ".github/workflows/kernelpilot-pr.yml",
        ROOT / "examples/workflows/kernelpilot-pr.yml",
    ):
        workflow = load(path)
        assert set(workflow["on"]) == {"pull_request_target"}
        assert set(workflow["on"]["pull_request_target"]["types"]) == {
            "opened", "synchronize", "reopened", "labeled"}  # fmt: skip
        gate, measure, publish = (workflow["jobs"][j] for j in ("gate", "measure", "publish"))
        assert "github.actor != 'github-actions[bot]'" in gate["if"]
        assert "!startsWith(github.head_ref, 'kernelpilot/')" in gate["if"]
        # The approval label: the one the gate is given, the one the run filters on.
        [gate_step] = [s for s in gate["steps"] if kernelpilot_mode(s) == "gate"]
        assert gate_step["with"]["approval-label"] == APPROVAL_LABEL
        assert f"github.event.label.name == '{APPROVAL_LABEL}'" in gate["if"]
        assert f"github.event.label.name == '{APPROVAL_LABEL}'" in workflow["concurrency"]["group"]
        assert workflow["concurrency"]["cancel-in-progress"] is True
        assert measure["needs"] == "gate" and measure["if"] == "needs.gate.outputs.run == 'true'"
        [checkout] = [s for s in measure["steps"] if is_checkout(s) and "ref" in s["with"]]
        assert checkout["with"]["ref"] == "${{ needs.gate.outputs.sha }}"
        assert checkout["with"]["fetch-depth"] == 0 and checkout["with"]["path"] == "pr"
        assert publish["needs"] == "measure"
        assert publish["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_the_matrix_plans_without_running_the_pull_request_and_merges_before_publishing():
    """The plan job checks out the approved head to read which classes changed, with nothing to
    write with and no secret; each measure job gets its shard and uploads under its own name;
    publish merges every shard's artifact (the plan says which are missing) before it posts."""
    workflow = load(ROOT / "examples/workflows/kernelpilot-pr-matrix.yml")
    plan, measure, publish = (workflow["jobs"][j] for j in ("plan", "measure", "publish"))
    assert plan["needs"] == "gate" and plan["if"] == "needs.gate.outputs.run == 'true'"
    assert plan["permissions"] == {"contents": "read"} and "secrets." not in json.dumps(plan)
    assert "token" not in json.dumps(plan) and plan["runs-on"] == "ubuntu-latest"
    [checkout] = [s for s in plan["steps"] if is_checkout(s)]
    assert checkout["with"]["ref"] == "${{ needs.gate.outputs.sha }}"
    assert measure["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert measure["strategy"]["fail-fast"] is False
    [step] = [s for s in measure["steps"] if kernelpilot_mode(s) == "measure"]
    assert step["with"]["only"] == "${{ matrix.only }}"
    [upload] = [s for s in measure["steps"] if "upload-artifact" in s.get("uses", "")]
    assert upload["with"]["name"] == "kernelpilot-results-${{ matrix.shard }}"
    [download] = [s for s in publish["steps"] if "download-artifact" in s.get("uses", "")]
    assert download["with"]["pattern"] == "kernelpilot-results-*"
    assert "merge-multiple" not in download["with"]  # a folder each: merge checks each
    modes = [kernelpilot_mode(s) for s in publish["steps"] if kernelpilot_mode(s)]
    assert modes == ["merge", "publish"]
    [merge] = [s for s in publish["steps"] if kernelpilot_mode(s) == "merge"]
    assert merge["with"]["plan"] == "${{ needs.plan.outputs.matrix }}"


def test_project_workflows_are_the_examples():
    """.github/workflows/kernelpilot-*.yml = examples/workflows/kernelpilot-*.yml, except that
    the action comes from a checkout of this repository (the base branch, trusted) rather than
    from a pinned release."""
    for path in PROJECT_WORKFLOWS:
        if not path.name.startswith("kernelpilot-"):
            continue
        project = load(path)
        for job in project["jobs"].values():
            job["steps"] = [
                s
                for s in job["steps"]
                if not (is_checkout(s) and s["with"].get("path") == TRUSTED_CHECKOUT_PATH)
            ]
            for step in job["steps"]:
                if step.get("uses") == f"./{TRUSTED_CHECKOUT_PATH}":
                    step["uses"] = PLACEHOLDER
        assert project == load(ROOT / "examples/workflows" / path.name), path.name


def test_ci_still_runs_the_test_command():
    ci = load(ROOT / ".github/workflows/ci.yml")
    assert [s["run"] for _, s in steps(ci) if "run" in s] == ["bash .ci/run"]


# -- act: the real workflows, run locally against the fake GitHub server -----------------------

REPO = "acme/models"
NUMBER = 3
# The module, its change and the project are the PR-flow tests' own (tests/prflow.py).


class UserRepository:
    """A user's repository with the example workflow: the base commit on main, a PR's head on
    feature; pushed to the runner's stand-in for github.com and seeded on the fake server with
    the same commit SHAs; `checkout` is where act runs (main, as GitHub's event commit for
    pull_request_target and for a dispatch on main)."""

    def __init__(
        self, tmp: Path, fake, workflows: list[str], ephemeral_runner: bool = False,
        head_files: dict[str, str] | None = None, edits: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.fake = fake
        self.act = ActRunner(tmp, fake.base_url)
        self.checkout = tmp / "checkout"
        self.checkout.mkdir()
        git(self.checkout, "init", "-q", "-b", "main")
        git(self.checkout, "remote", "add", "origin", f"https://github.com/{REPO}.git")
        self.base_files = {"pyproject.toml": PROJECT, "models/act.py": MODULE,
                           "tests/__init__.py": ""}  # fmt: skip
        for name in workflows:
            text = (ROOT / "examples/workflows" / name).read_text()
            if ephemeral_runner:  # what the user sets once the kernelpilot-pr runners are
                assert text.count("ephemeral-runner: false") == 1
                text = text.replace("ephemeral-runner: false", "ephemeral-runner: true")
            for old, new in (edits or {}).items():
                assert text.count(old) == 1, old
                text = text.replace(old, new)
            self.base_files[f".github/workflows/{name}"] = text
        self.base = self.commit(self.base_files, "base")
        git(self.checkout, "checkout", "-q", "-b", "feature")
        self.head_files = head_files or {"models/act.py": CHANGED}
        self.head = self.commit(self.head_files, "a changed activation")
        git(self.checkout, "checkout", "-q", "main")
        git(
            self.checkout,
            "push",
            "-q",
            str(self.act.remote(REPO)),
            "main",
            "feature",
            f"{self.head}:refs/pull/{NUMBER}/head",
        )
        self.kernelpilot = copy_kernelpilot(tmp / "kernelpilot")
        fake.add_user("maintainer-token", "maintainer", "admin")
        fake.add_user("actions-token", "github-actions[bot]", "write")
        fake.add_repo(REPO)
        fake.push(REPO, "main", self.base_files, "base", sha=self.base)

    def commit(self, files: dict[str, str], message: str) -> str:
        for name, text in files.items():
            (self.checkout / name).parent.mkdir(parents=True, exist_ok=True)
            (self.checkout / name).write_text(text)
        git(self.checkout, "add", "-A")
        git(self.checkout, "commit", "-q", "-m", message)
        return git(self.checkout, "rev-parse", "HEAD")

    def run(self, workflow: str, event_name: str, event: dict[str, Any], actor: str):
        result = self.act.run(f".github/workflows/{workflow}", event_name, event, self.checkout,
                              actions={"your-org/kernelpilot": self.kernelpilot}, actor=actor,
                              secrets={"GITHUB_TOKEN": "actions-token"})  # fmt: skip
        # Logs of failed runs are long: the end says what failed.
        assert result.returncode == 0, result.log[-12000:]
        return result

    def comments(self) -> list:
        return [c for c in self.fake.comments(REPO, NUMBER) if c.body.startswith(MARKER)]

    def followups(self) -> list:
        pulls = self.fake.client("maintainer-token").get_repo(REPO).get_pulls(state="open")
        return [p for p in pulls if p.head.ref.startswith("kernelpilot/")]


def test_a_label_other_than_approval_runs_nothing(fake_github, tmp_path):
    """Labels come and go on pull requests: only the approval label starts anything (so a label
    cancels nothing in progress either, its run being in a concurrency group of its own). The
    approval label does start the gate: test_pull_request_workflow_from_a_fork_runs_after_approval."""
    repo = UserRepository(tmp_path, fake_github, ["kernelpilot-pr.yml"])
    fake_github.add_pull(REPO, NUMBER, head_ref="feature", head_sha=repo.head,
                         head_files=repo.head_files, author="maintainer")  # fmt: skip
    fake_github.add_label(REPO, NUMBER, "documentation", actor="maintainer")
    event = fake_github.pull_event(REPO, NUMBER, "labeled", label="documentation",
                                   sender="maintainer")  # fmt: skip
    result = repo.run("kernelpilot-pr.yml", "pull_request_target", event, actor="maintainer")
    assert "Gate" not in result.log and "Job succeeded" not in result.log
    assert fake_github.calls("POST") == []


@pytest.mark.slow
def test_pull_request_workflow_from_a_fork_runs_after_approval(fake_github, tmp_path):
    """The example PR workflow, for a fork's pull request: opened, the gate says why nothing
    runs (no PR code is checked out); a maintainer adds the approval label, and the head SHA
    of that moment is measured on the runner and commented on, its kernel as a patch (no
    branch is made on a fork's head). The workflow declares its runner ephemeral (act sets no
    RUNNER_ENVIRONMENT: without it, measure refuses the fork, tests/test_nightly_jobs.py)."""
    repo = UserRepository(tmp_path, fake_github, ["kernelpilot-pr.yml"], ephemeral_runner=True)
    fake_github.add_pull(REPO, NUMBER, head_ref="feature", head_sha=repo.head, fork=True,
                         head_files=repo.head_files, author="contributor")  # fmt: skip

    opened = repo.run(
        "kernelpilot-pr.yml",
        "pull_request_target",
        fake_github.pull_event(REPO, NUMBER, "opened"),
        actor="contributor",
    )
    assert opened.job_succeeded("Gate") and not opened.job_succeeded("Measure")
    assert "actions/checkout" not in opened.log  # no job checked anything out
    [notice] = repo.comments()
    assert APPROVAL_LABEL in notice.body and repo.followups() == []

    fake_github.add_label(REPO, NUMBER, APPROVAL_LABEL, actor="maintainer")
    approved = fake_github.pull_event(REPO, NUMBER, "labeled", label=APPROVAL_LABEL,
                                      sender="maintainer")  # fmt: skip
    result = repo.run("kernelpilot-pr.yml", "pull_request_target", approved, actor="maintainer")
    for job in ("Gate", "Measure", "Publish"):
        assert result.job_succeeded(job), job
    assert f"checked out {REPO} at {repo.head} into pr" in result.log
    # kernelpilot's own environment reused the interpreter's torch rather than installing one.
    assert re.search(r"Requirement already satisfied: torch\b", result.log)
    assert "::stop-commands::" in result.log
    [comment] = repo.comments()  # the notice, edited into the results
    assert comment.id == notice.id and "models/act.py:Activation" in comment.body
    # No branch made on a fork's unreviewed head: the kernel comes as a patch in the comment.
    assert (
        repo.followups() == []
        and f"refs/heads/kernelpilot/pr-{NUMBER}" not in fake_github.repo(REPO).refs
    )
    assert "generated from this fork's unreviewed code" in comment.body
    assert "diff --git a/models/act_kernelpilot.py" in comment.body


@pytest.mark.slow
def test_dispatch_workflow_opens_a_pull_request_with_the_kernels(fake_github, tmp_path):
    """The example workflow_dispatch workflow: its inputs name the target; the branch's code is
    measured by the read-only job, and the writing job opens a pull request with the kernels."""
    repo = UserRepository(tmp_path, fake_github, ["kernelpilot-dispatch.yml"])
    event = {
        "inputs": {"targets": "models/act.py:Activation", "budget": "", "model": "",
                   "open-pr": "true"},
        "ref": "refs/heads/main",
        "repository": {"full_name": REPO, "name": "models", "owner": {"login": "acme"},
                       "default_branch": "main"},
        "sender": {"login": "maintainer"},
        "workflow": ".github/workflows/kernelpilot-dispatch.yml",
    }  # fmt: skip
    result = repo.run("kernelpilot-dispatch.yml", "workflow_dispatch", event, actor="maintainer")
    assert result.job_succeeded("Measure") and result.job_succeeded("Publish")
    [followup] = repo.followups()
    assert followup.base.ref == "main"
    kernel_files = [f.filename for f in followup.get_files()]
    assert any(name.startswith("models/") and "kernelpilot" in name for name in kernel_files)


MEASURE_JOB = "Nightly benchmark (measure)"
PUBLISH_JOB = "Nightly benchmark (publish)"


def uploaded_at(act: ActRunner) -> float:
    """When the artifact stand-in uploaded the nightly's results (the measuring job's end)."""
    stamps = sorted(act.artifacts.glob("*/kernelpilot-nightly.uploaded-at"),
                    key=lambda path: path.stat().st_mtime)  # fmt: skip
    return float(stamps[-1].read_text())  # the last run's


@pytest.mark.slow
def test_nightly_workflow_records_the_shipped_kernel_and_opens_an_issue_once_it_is_stale(
    fake_github, tmp_path
):
    """The example nightly workflow on a schedule event, its two jobs: the kernel a merged
    follow-up shipped (verified for real by `kernelpilot review`) is re-verified by the
    measuring job, which sends GitHub no request at all; the publishing job records it on the
    data branch with its plot. After its module changes, the night reports it stale: measure
    fails the run, and publish still records the night and opens the issue."""
    from bot.pr.followup import build_followup
    from bot.pr.results import PullResults

    repo = UserRepository(tmp_path, fake_github, ["kernelpilot-nightly.yml"])
    git(repo.checkout, "checkout", "-q", "feature")
    done = subprocess.run(
        [sys.executable, "-c", "from bot.cli import main; main()", "review", "--base", "main",
         "--device", "cpu", "--seed", "1", "--out", str(tmp_path / "review")],
        cwd=repo.checkout, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = PullResults.model_validate_json((tmp_path / "review" / "results.json").read_text())
    followup = build_followup(results, results.test_dir)
    assert followup is not None
    git(repo.checkout, "checkout", "-q", "main")
    git(repo.checkout, "merge", "-q", "--ff-only", "feature")
    shipped = {f.path: f.content for f in followup.files}
    merged = repo.commit(shipped, "merge kernelpilot's follow-up")

    def publish_main(sha: str, files: dict[str, str]) -> None:
        git(repo.checkout, "push", "-q", str(repo.act.remote(REPO)), "main")
        fake_github.push(REPO, "main", files, "main moved", sha=sha)

    publish_main(merged, {**repo.head_files, **shipped})
    event = {"schedule": "17 3 * * *", "repository": {"full_name": REPO, "name": "models",
             "owner": {"login": "acme"}, "default_branch": "main"}}  # fmt: skip
    result = repo.run("kernelpilot-nightly.yml", "schedule", event, actor="maintainer")
    assert result.job_succeeded(MEASURE_JOB) and result.job_succeeded(PUBLISH_JOB)
    measured = uploaded_at(repo.act)
    assert [r for r in fake_github.requests if r.at < measured] == []  # measure: none at all
    assert {r.login for r in fake_github.requests} == {"github-actions[bot]"}  # publish's token
    seen = len(fake_github.requests)
    history = "history/kernel_models_act_verified_kernelpilot.py.jsonl"
    [night] = fake_github.file(REPO, history, "kernelpilot-data").decode().splitlines()
    assert json.loads(night)["status"] == "ok" and json.loads(night)["commit"] == merged
    png = fake_github.file(
        REPO, "plots/kernel_models_act_verified_kernelpilot.py.png", "kernelpilot-data"
    )
    assert png is not None and png.startswith(b"\x89PNG")
    assert [i for i in fake_github.repo(REPO).issues.values() if i.pull is None] == []

    changed = CHANGED.replace("0.5 * y * y", "0.3 * y * y")
    retuned = repo.commit({"models/act.py": changed}, "retune the activation")
    publish_main(retuned, {"models/act.py": changed})
    stale = repo.act.run(".github/workflows/kernelpilot-nightly.yml", "schedule", event,
                         repo.checkout, actions={"your-org/kernelpilot": repo.kernelpilot},
                         actor="maintainer", secrets={"GITHUB_TOKEN": "actions-token"})  # fmt: skip
    assert stale.returncode != 0  # a stale kernel fails the night: the measuring job
    assert not stale.job_succeeded(MEASURE_JOB) and stale.job_succeeded(PUBLISH_JOB), stale.log[
        -8000:
    ]
    measured = uploaded_at(repo.act)
    assert [r for r in fake_github.requests[seen:] if r.at < measured] == []
    nights = fake_github.file(REPO, history, "kernelpilot-data").decode().splitlines()
    assert (
        json.loads(nights[-1])["status"] == "stale"
        and retuned[:12] in json.loads(nights[-1])["note"]
    )
    [issue] = [i for i in fake_github.repo(REPO).issues.values() if i.pull is None]
    assert issue.title == "kernelpilot nightly: 0 slower or failing, 1 stale or missing"
    assert "kernelpilot-data/plots/kernel_models_act_verified_kernelpilot.py.png" in issue.body


TWO_CLASSES = (
    CHANGED
    + """

class Gate(nn.Module):
    \"\"\"Nothing configures or calls it: kernelpilot guesses its inputs.\"\"\"

    def forward(self, x):
        return torch.sigmoid(x) * x + 0.5 * torch.tanh(x)
"""
)


@pytest.mark.slow
def test_matrix_workflow_measures_shards_on_their_own_runners_and_posts_one_comment(
    fake_github, tmp_path
):
    """The example matrix workflow for a same-repository pull request that changes two modules:
    plan splits them over two measure jobs, each measures its own, and publish merges both
    shards' artifacts into one comment and one follow-up pull request."""
    # One shard at a time: on this one 2-core machine, two measuring jobs side by side would be
    # judged (rightly) as timed on a busy machine; on GitHub each has a runner of its own.
    serial = {"      fail-fast: false\n": "      fail-fast: false\n      max-parallel: 1\n"}
    repo = UserRepository(tmp_path, fake_github, ["kernelpilot-pr-matrix.yml"],
                          head_files={"models/act.py": TWO_CLASSES}, edits=serial)  # fmt: skip
    fake_github.add_pull(REPO, NUMBER, head_ref="feature", head_sha=repo.head,
                         head_files=repo.head_files, author="maintainer")  # fmt: skip
    event = fake_github.pull_event(REPO, NUMBER, "opened")
    result = repo.run("kernelpilot-pr-matrix.yml", "pull_request_target", event,
                      actor="maintainer")  # fmt: skip
    for job in ("Gate", "Plan", "Measure shard 1", "Measure shard 2", "Publish"):
        assert result.job_succeeded(job), job
    assert "shard 1: models/act.py:Activation" in result.log
    assert "shard 2: models/act.py:Gate" in result.log
    assert "merged 2 shard(s): 2 module(s) measured" in result.log
    [comment] = repo.comments()
    assert "models/act.py:Activation" in comment.body and "models/act.py:Gate" in comment.body
    assert "left no results" not in comment.body
    [followup] = repo.followups()
    assert followup.head.ref == f"kernelpilot/pr-{NUMBER}"
