"""The agent team end to end on cpu: the real ``openai`` client against the loopback server,
the real roles, the real harness. The scripted replies hold a candidate that fails to build
(the debugger repairs it), one the gate rejects and one that is wrong; the search goes on and
the report holds the verified kernel. Replayed from its trajectory, the run grows the same tree.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from agents.llm.client import LLMConfig
from agents.replay import replay
from agents.search.config import SearchConfig
from agents.trajectory import Trajectory
from bot.cli import main
from tests.conftest import FIXTURES
from tests.fake_openai import reply

BEGINS, ENDS = "<<<IMPROVE BEGINS>>>", "<<<IMPROVE ENDS>>>"
HONEST = (FIXTURES / "isolation_honest.py").read_text()
PROJECT = """
[tool.kernelpilot]
[tool.kernelpilot.eval]
compile_baseline = false
time_budget_s = 0.2
min_reps = 5
max_reps = 50
[tool.kernelpilot.search]
strategy = "epsilon-greedy"
epsilon = 1.0          # after the first step, always a random leaf: the path is known
seed_offline = false   # the LLM's candidates only
root_first = 1         # then the path goes on from the first child
attempts = 4
"""


def plan(line: str, instruction: str) -> str:
    return f"Fuse the pointwise ops.\n{BEGINS}\n{line}\n{ENDS}\n{instruction}\n"


def code(source: str) -> str:
    return f"Here is the kernel.\n```python\n{source}\n```\n"


def script() -> list:
    problem_line = "        return torch.tanh(x) * self.scale + x"
    return [
        # step 1, the reference: a plan, and a candidate that does not compile
        reply(plan(problem_line, "One C++ loop for tanh, scale and add.")),
        reply(code((FIXTURES / "bad" / "compile_error.py").read_text())),
        # step 2, the build failure: the debugger's repair is verified
        reply(code(HONEST)),
        # step 3, the verified kernel: a plan, and a candidate the gate rejects
        reply(plan("        return _ext.honest(x, self.scale)", "Read the scale from the env.")),
        reply(code("import os\n" + HONEST)),
        # step 4, the rejection: the debugger's version is wrong (one element off)
        reply(code((FIXTURES / "isolation_wrong.py").read_text())),
    ]


def test_the_team_finds_a_verified_kernel_through_failures(fake_openai, tmp_path, monkeypatch):
    fake_openai.push(*script())
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    result = CliRunner().invoke(
        main,
        ["optimize", str(FIXTURES / "scale_problem.py"), "--device", "cpu", "--llm", "openai",
         "--model", "fake-model", "--seed", "3", "--out", str(out)],
        env=env,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    row = json.loads((out / "report.json").read_text())["targets"][0]
    assert row["status"] == "ok", row["reason"]
    assert row["proposer"] == "fake-model" and row["attempts"] == 4 and row["tokens"] == 6 * 15
    assert (out / "scale_problem_kernel.py").read_text() == HONEST

    trajectory = Trajectory.load(Path(row["trajectory_file"]))
    nodes = trajectory.tree.nodes
    verdicts = {node_id: node.result.status.value for node_id, node in nodes.items() if node.result}
    assert verdicts == {
        "0.1": "build_error",
        "0.1.1": "ok",
        "0.1.1.1": "rejected",
        "0.1.1.1.1": "incorrect",
    }
    assert [node.kind for node in nodes.values()] == [
        "root",
        "improve",
        "debug",
        "improve",
        "debug",
    ]
    gate_reason = nodes["0.1.1.1"].result.reason
    assert "imports os" in gate_reason
    assert trajectory.stopped == "budget reached: 4 attempts"
    # Two roles at their own temperatures: planner 0.8, coder and debugger 0.1.
    temperatures = [body["temperature"] for body in fake_openai.bodies]
    assert temperatures == [0.8, 0.1, 0.1, 0.8, 0.1, 0.1]
    # The debugger read the build log, and then the gate's reasons verbatim.
    debugger_prompts = [body["messages"][-1]["content"] for body in fake_openai.bodies[2::3]]
    assert "build_error" in debugger_prompts[0] and gate_reason in debugger_prompts[1]
    # The planner is told what the harness measured about the kernel it improves.
    planner_prompt = fake_openai.bodies[3]["messages"][-1]["content"]
    assert "Speedup vs eager" in planner_prompt and "One profiled call" in planner_prompt
    assert nodes["0.1.1"].result.time_breakdown
    # ... and what it is up against: eager's call, profiled by the same timing worker
    assert nodes["0.1.1"].result.baseline_breakdowns["eager"]
    assert "One profiled call of eager" in planner_prompt

    again = replay(
        trajectory,
        LLMConfig(provider="openai", model="fake-model"),
        SearchConfig(
            strategy="epsilon-greedy", epsilon=1.0, seed_offline=False, root_first=1, attempts=4
        ),
        tmp_path / "replayed.json",
    )
    shape = lambda t: [(n.id, n.kind, n.candidate, n.plan, n.result and n.result.status)  # noqa: E731
                       for n in t.tree.nodes.values()]  # fmt: skip
    assert shape(again) == shape(trajectory)


def test_a_bad_key_stops_the_run_at_once_with_what_to_fix(fake_openai, tmp_path, monkeypatch):
    from tests.fake_openai import unauthorized

    fake_openai.push(unauthorized())
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    monkeypatch.chdir(tmp_path)
    target = str(FIXTURES / "scale_problem.py")
    result = CliRunner().invoke(
        main,
        ["optimize", target, target, "--device", "cpu", "--llm", "openai", "--out",
         str(tmp_path / "out")],
        env={"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-secret-key"},
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and "fix:" in result.output
    assert "sk-secret-key" not in result.output
    assert len(fake_openai.requests) == 1  # not retried, and the second target never asked


def test_a_resumed_search_goes_on_where_it_stopped(fake_openai, tmp_path, monkeypatch):
    replies = script()
    fake_openai.push(*replies[:3])  # two steps: the build error and its repair
    (tmp_path / "pyproject.toml").write_text(PROJECT)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    common = ["--device", "cpu", "--llm", "openai", "--model", "fake-model", "--out", str(out)]
    first = CliRunner().invoke(
        main, ["optimize", str(FIXTURES / "scale_problem.py"), "--budget", "2", "--seed", "3",
               *common], env=env)  # fmt: skip
    assert first.exit_code == 0, first.output
    saved = out / "trajectory-scale_problem.json"
    assert list(Trajectory.load(saved).tree.nodes) == ["0", "0.1", "0.1.1"]

    fake_openai.push(*replies[3:])  # only what the last two steps ask
    second = CliRunner().invoke(main, ["optimize", "--resume", str(saved), "--budget", "4",
                                       *common], env=env)  # fmt: skip
    assert second.exit_code == 0, second.output
    resumed = Trajectory.load(saved)
    assert list(resumed.tree.nodes) == ["0", "0.1", "0.1.1", "0.1.1.1", "0.1.1.1.1"]
    assert resumed.budget.spent_attempts == 4 and len(fake_openai.requests) == 6
    assert resumed.tree.nodes["0.1.1"].result.status.value == "ok"  # kept, not run again


# --- issue 22: spend caps and secrets in worker logs ----------------------------------------

# No search budget set: the defaults apply (30 attempts, the default spend caps).
CAPPED_PROJECT = """
[tool.kernelpilot]
[tool.kernelpilot.eval]
compile_baseline = false
time_budget_s = 0.2
min_reps = 5
max_reps = 50
[tool.kernelpilot.search]
seed_offline = false
"""
WORDS = "Just fuse it all."  # no grounded plan, no code: nothing is built


def run_optimize(
    tmp_path, monkeypatch, project: str, args: list[str], env: dict, exit_code: int = 0
) -> dict:
    return run_optimize_output(tmp_path, monkeypatch, project, args, env, exit_code)[0]


def run_optimize_output(
    tmp_path, monkeypatch, project: str, args: list[str], env: dict, exit_code: int = 0
) -> tuple[dict, str]:
    """The report's row of the one target, and what the command printed (stderr too)."""
    output = run_cli(tmp_path, monkeypatch, project, args, env, exit_code)
    return json.loads((tmp_path / "out" / "report.json").read_text())["targets"][0], output


def run_cli(
    tmp_path, monkeypatch, project: str, args: list[str], env: dict, exit_code: int = 0
) -> str:
    (tmp_path / "pyproject.toml").write_text(project)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        main,
        ["optimize", str(FIXTURES / "scale_problem.py"), "--device", "cpu", "--seed", "3",
         "--out", str(tmp_path / "out"), *args],
        env=env,
    )  # fmt: skip
    assert result.exit_code == exit_code, result.output
    assert OPENAI_KEY not in result.output and GITHUB_TOKEN not in result.output
    return result.output


def model_calls(row: dict) -> list:
    trajectory = Trajectory.load(Path(row["trajectory_file"]))
    return [call for node in trajectory.tree.nodes.values() for call in node.calls]


def test_the_default_cost_cap_stops_the_scripted_model(tmp_path, monkeypatch):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": WORDS, "cost_usd": 2.0}] * 10))
    row = run_optimize(tmp_path, monkeypatch, CAPPED_PROJECT,
                       ["--llm", "scripted", "--script", str(script)], {})  # fmt: skip
    # planner $2, planner again $4, coder $6: the coder is not asked again, the search ends.
    cap = "the cost cap of $5.00 per target (spent $6.00)"
    assert cap in row["reason"] and "--max-cost" in row["reason"]
    assert Trajectory.load(Path(row["trajectory_file"])).stopped == f"budget reached: {cap}"
    assert [call.role for call in model_calls(row)] == ["planner", "planner", "coder"]
    assert row["cost_usd"] == 6.0 and row["attempts"] == 1


def test_the_default_cost_cap_stops_the_openai_client_priced_from_usage(
    fake_openai, tmp_path, monkeypatch
):
    # gpt-4.1 at its list price ($2 per million prompt tokens): $2 a call.
    fake_openai.push(*[reply(WORDS, model="gpt-4.1", prompt_tokens=10**6, completion_tokens=0)] * 5)
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    row = run_optimize(tmp_path, monkeypatch, CAPPED_PROJECT,
                       ["--llm", "openai", "--model", "gpt-4.1"], env)  # fmt: skip
    assert "the cost cap of $5.00 per target (spent $6.00)" in row["reason"]
    assert len(fake_openai.requests) == 3 and row["cost_usd"] == 6.0


def test_without_usage_an_unpriced_model_is_stopped_by_the_token_cap(
    fake_openai, tmp_path, monkeypatch
):
    """A server that sends no usage (some vLLM, Ollama and proxy setups): tokens are counted
    as an upper bound, so the token cap that stands in for the cost cap still holds."""
    fake_openai.push(*[reply(WORDS, model="local-llama", usage=False)] * 10)
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    project = CAPPED_PROJECT + "max_unpriced_tokens = 100000\n"
    row = run_optimize(tmp_path, monkeypatch, project,
                       ["--llm", "openai", "--model", "local-llama"], env)  # fmt: skip
    assert "100,000 tokens per target for a model without a price" in row["reason"]
    assert row["cost_usd"] is None and 2 <= len(fake_openai.requests) <= 4
    assert all(call.prompt_tokens > 10_000 for call in model_calls(row))  # bytes, not 0


SECRET_ENV = "KP_E2E_DEPLOY_TOKEN"
PARENT_SECRET = "Shapeless" + "Value" + "0451"
OPENAI_KEY = "sk-" + "proj-" + "Q7" * 16
GITHUB_TOKEN = "ghp" + "_" + "Z9" * 18
# A candidate that builds and runs (the shared test kernel), and whose forward raises with the
# keys: assembled at run time, so the worker's log holds them and the source does not.
LEAKING = HONEST.replace(
    "        return _ext.honest(x, self.scale)",
    '        y = _ext.honest(x, self.scale)\n'
    '        if y.numel() > 0:\n'
    '            raise RuntimeError("environ: " + "sk-" + "proj-" + "Q7" * 16 + " " + "ghp" + "_"\n'
    '                               + "Z9" * 18 + " " + "Shapeless" + "Value" + "0451")\n'
    '        return y',
)  # fmt: skip


def test_a_worker_log_with_keys_reaches_no_prompt_trajectory_or_report(
    fake_openai, tmp_path, monkeypatch
):
    assert OPENAI_KEY not in LEAKING and GITHUB_TOKEN not in LEAKING
    monkeypatch.setenv(SECRET_ENV, PARENT_SECRET)  # the parent's secret, as /proc would show it
    problem_line = "        return torch.tanh(x) * self.scale + x"
    fake_openai.push(
        reply(plan(problem_line, "One C++ loop.")),
        reply(code(LEAKING)),
        reply(WORDS),  # the debugger, twice: no repair, so the report shows the leaking node
        reply(WORDS),
    )
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    project = CAPPED_PROJECT + "attempts = 2\nroot_first = 1\n"
    row = run_optimize(tmp_path, monkeypatch, project,
                       ["--llm", "openai", "--model", "fake-model"], env, exit_code=1)  # fmt: skip
    assert row["status"] == "runtime_error", row["reason"]  # no kernel: exit status 1
    trajectory = Path(row["trajectory_file"]).read_text()
    debugger_prompt = fake_openai.bodies[2]["messages"][-1]["content"]
    assert "environ: [REDACTED]" in debugger_prompt and "environ: [REDACTED]" in trajectory
    out = tmp_path / "out"
    texts = {"trajectory": trajectory, "debugger prompt": debugger_prompt}
    texts |= {path.name: path.read_text() for path in out.iterdir() if path.suffix != ".py"}
    texts |= {f"request {n}": json.dumps(body) for n, body in enumerate(fake_openai.bodies)}
    for where, text in texts.items():
        for secret in (OPENAI_KEY, GITHUB_TOKEN, PARENT_SECRET):
            assert secret not in text, f"{secret} in {where}"


# --- issue 23: deadlines, progress, and why an endpoint failed -------------------------------

# One call of the model, retried once, then the step ends: the search is one step long.
ONE_STEP_PROJECT = (
    CAPPED_PROJECT
    + """attempts = 1
root_first = 1
[tool.kernelpilot.llm]
timeout_s = 20
max_retries = 1
"""
)
SLACK_S = 5.0  # past the deadline: the end of the timed-out request and of the step, loaded


def test_max_time_ends_a_call_to_a_hanging_endpoint(fake_openai, tmp_path, monkeypatch):
    from tests.fake_openai import hang

    fake_openai.push(hang(), hang())
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    project = ONE_STEP_PROJECT.replace("attempts = 1", "attempts = 5")
    row, output = run_optimize_output(tmp_path, monkeypatch, project,
                                      ["--llm", "openai", "--model", "fake-model",
                                       "--max-time", "3"], env)  # fmt: skip
    trajectory = Trajectory.load(Path(row["trajectory_file"]))
    assert trajectory.stopped == "budget reached: 3 s of wall time"
    [call] = model_calls(row)  # the search stopped at the deadline: no second step
    assert "the search's --max-time of 3 s ran out during the planner's call" in call.error
    assert 0 < call.seconds <= 3 + SLACK_S and len(fake_openai.requests) == 1
    asking = f"planner: asking fake-model at {fake_openai.base_url} (attempt 1 of 2, "
    assert asking in output and "ran out during the planner's call" in output


def test_an_endpoint_on_a_closed_port_stops_the_run_after_one_call(tmp_path, monkeypatch):
    from tests.fake_openai import closed_port_url

    base_url = closed_port_url()
    env = {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test"}
    project = ONE_STEP_PROJECT.replace("attempts = 1", "attempts = 3")
    output = run_cli(tmp_path, monkeypatch, project, ["--llm", "openai", "--model", "fake-model"],
                     env, exit_code=2)  # fmt: skip
    assert f"error: cannot reach the LLM endpoint {base_url}" in output
    assert "Connection refused" in output and "fix: check base_url" in output
    assert output.count("planner: asking fake-model") == 2  # one call, retried once; no step more


def test_why_a_call_failed_reaches_the_terminal(fake_openai, tmp_path, monkeypatch):
    from tests.fake_openai import server_error

    problem_line = "        return torch.tanh(x) * self.scale + x"
    fake_openai.push(reply(plan(problem_line, "One C++ loop.")), *[server_error(503)] * 2)
    env = {"OPENAI_BASE_URL": fake_openai.base_url, "OPENAI_API_KEY": "sk-test"}
    row, output = run_optimize_output(tmp_path, monkeypatch, ONE_STEP_PROJECT,
                                      ["--llm", "openai", "--model", "fake-model"], env,
                                      exit_code=0)  # fmt: skip
    said = "HTTP 503 after 2 attempts: The server had an error while processing your request."
    assert f"coder: the call failed: {said}" in output  # the client's own line
    status = next(line for line in output.splitlines() if "step 1 from 0:" in line)
    assert f"0.1 no candidate (coder: llm_call_failed: {said}" in status
    assert said in row["reason"]
