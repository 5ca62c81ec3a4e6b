"""What prompts cost: every call of a run starts with one byte-identical system message (the
prefix a provider's prompt cache reuses), the cached tokens a server reports are read, priced
at the cached rate, and carried through the trajectory, replay and the report; a server that
does not report them reads "unknown", never 0.

The searches here are the real loop and the real roles; the harness's verdicts come from a
small evaluator that judges each candidate by a tag in its source (no build, no worker).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.context import Reference
from agents.llm import LLMConfig, ModelPrice, ScriptedClient, ScriptedReply
from agents.llm.openai_client import OpenAIChatClient
from agents.loop import new_trajectory, search
from agents.replay import recorded_replies
from agents.search.config import SearchConfig
from agents.team import Team, TeamConfig
from agents.trajectory import CallSpend, Trajectory
from bot.render import render_markdown, render_terminal
from bot.report import Report, TargetReport, TargetStatus
from harness.records import Candidate, EvalResult, Problem, Status, Timings, TimingStats
from tests.fake_openai import FakeOpenAI, prefix_cached_reply, reply
from tests.prompt_cache import BYTES_PER_TOKEN, CACHE_STEP_TOKENS

BEGINS, ENDS = "<<<IMPROVE BEGINS>>>", "<<<IMPROVE ENDS>>>"
KEY_ENV = "KP_TEST_PROMPT_COST_KEY"
DATA_ID = re.compile(r'<data id="([0-9a-f]+)"')
REFERENCE_LINE = "        return x.add(x)  # the target's own line"
CONFIG = SearchConfig(strategy="epsilon-greedy", epsilon=1.0, seed_offline=False, root_first=1,
                      attempts=4)  # fmt: skip


def module(class_name: str, body: str) -> str:
    return (
        f"import torch\n\n\nclass {class_name}(torch.nn.Module):\n    def forward(self, x):\n{body}"
    )


def candidate(tag: str) -> str:
    return (
        "Here it is.\n```python\n"
        + module("ModelNew", f"        return x * 2  # {tag}\n")
        + "```\n"
    )


def plan(line: str) -> str:
    return f"Fuse it.\n{BEGINS}\n{line}\n{ENDS}\nOne loop.\n"


def script(reference_line: str) -> list[str]:
    """Four attempts: a plan asked again, a build failure repaired, a rejection repaired."""
    return [
        "Just fuse everything.",  # the planner, no markers: asked again at the same step
        plan(reference_line),
        candidate("build_error"),
        candidate("ok"),  # the debugger
        plan("        return x * 2  # ok"),
        candidate("rejected"),
        candidate("ok again"),  # the debugger
    ]


class TaggedEvaluator:
    """Each candidate's verdict is the tag in its source; a verified one is timed."""

    deadline: float | None = None

    def prebuild(self, problem: Problem, candidates: list[Candidate]) -> None:
        pass

    def parallel(self, problem: Problem) -> int:
        return 1

    def build(self, problem: Problem, candidate: Candidate) -> None:
        pass

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        for status in (Status.build_error, Status.rejected):
            if f"# {status.value}" in candidate.source:
                return EvalResult(status=status, reason=f"tagged {status.value}")
        timed = TimingStats(median_ms=0.5, iqr_ms=0.01, min_ms=0.49, samples=50)
        eager = TimingStats(median_ms=1.0, iqr_ms=0.01, min_ms=0.99, samples=50)
        return EvalResult(status=Status.ok, timings=Timings(candidate=timed, eager_beside=eager))


def run_search(tmp_path: Path, client, *, name: str, class_name: str, seed: int) -> Trajectory:
    source = module(class_name, REFERENCE_LINE + "\n")
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    problem = Problem(name=name, source_path=str(path), class_name=class_name, device="cpu",
                      dtype="float32")  # fmt: skip
    reference = Reference(source=source, class_name=class_name, device="cpu")
    llm = LLMConfig(provider="openai", model="fake-model", base_url="http://unused/v1")
    team = Team(client, llm, reference, TeamConfig())
    trajectory = new_trajectory(problem, "fake-model", CONFIG, seed=seed)
    out = tmp_path / f"trajectory-{name}.json"
    return search(problem, TaggedEvaluator(), team, trajectory, out, CONFIG, lambda line: None)


def scripted(lines: list[str]) -> ScriptedClient:
    return ScriptedClient([ScriptedReply(text=text) for text in lines])


def test_every_call_of_a_search_starts_with_one_byte_identical_system_message(tmp_path):
    first = scripted(script(REFERENCE_LINE))
    trajectory = run_search(tmp_path, first, name="first", class_name="Model", seed=1)
    assert trajectory.stopped == "budget reached: 4 attempts"
    roles = [call.role for node in trajectory.tree.nodes.values() for call in node.calls]
    assert roles == ["planner", "planner", "coder", "debugger", "planner", "coder", "debugger"]
    for call in first.calls:  # the system message first, once; everything that varies after
        assert [message.role for message in call.messages] == ["system", "user"]
    systems = {call.messages[0].content for call in first.calls}
    assert len(systems) == 1, "the system message differs between roles, steps or retries"
    [system] = systems

    # Another target, another class, another seed, later: the very same bytes.
    second = scripted(script(REFERENCE_LINE))
    run_search(tmp_path, second, name="second", class_name="Block", seed=99)
    assert {call.messages[0].content for call in second.calls} == {system}

    # Nothing that varies is in it: no data block (their ids are drawn per block), none of the
    # ids the user messages carry, nothing of the target.
    assert not DATA_ID.search(system)
    ids = {i for call in first.calls for i in DATA_ID.findall(call.messages[1].content)}
    assert ids and not any(block_id in system for block_id in ids)
    assert REFERENCE_LINE.strip() not in system and "class Block" not in system
    # Long enough for OpenAI's automatic caching (1,024 tokens; ~4 bytes a token is generous).
    assert len(system.encode()) // BYTES_PER_TOKEN > 1024


def client_for(fake: FakeOpenAI, monkeypatch, **prices: ModelPrice) -> OpenAIChatClient:
    monkeypatch.setenv(KEY_ENV, "sk-test")
    llm = LLMConfig(provider="openai", model="fake-model", base_url=fake.base_url,
                    api_key_env=KEY_ENV, max_retries=0, prices=prices)  # fmt: skip
    return OpenAIChatClient(llm)


PRICE = ModelPrice(input_per_million=2.0, cached_input_per_million=0.5, output_per_million=8.0)


def test_a_providers_prompt_cache_shows_per_attempt_in_the_trajectory_and_the_report(
    tmp_path, fake_openai, monkeypatch
):
    """The real client against a server that caches prompt prefixes as OpenAI does: every call
    after the first is served the system message from the cache, and that is what the
    trajectory, its replay and the report say, priced at the cached rate."""
    fake_openai.push(*(prefix_cached_reply(text) for text in script(REFERENCE_LINE)))
    client = client_for(fake_openai, monkeypatch, **{"fake-model": PRICE})
    trajectory = run_search(tmp_path, client, name="cached", class_name="Model", seed=1)
    calls = [call for node in trajectory.tree.nodes.values() for call in node.calls]
    assert len(calls) == 7 and calls[0].cached_tokens == 0  # nothing was cached before it
    system = fake_openai.bodies[0]["messages"][0]["content"].encode()
    at_least = (len(system) // BYTES_PER_TOKEN // CACHE_STEP_TOKENS - 1) * CACHE_STEP_TOKENS
    for call in calls[1:]:
        assert call.cached_tokens is not None and at_least <= call.cached_tokens
        assert call.cached_tokens < call.prompt_tokens
        cost = PRICE.cost_usd(call.prompt_tokens, call.completion_tokens, call.cached_tokens)
        assert call.cost_usd == pytest.approx(cost)
        assert cost < PRICE.cost_usd(call.prompt_tokens, call.completion_tokens)  # cheaper

    # Saved and loaded, replayed: the counts stay.
    saved = Trajectory.load(tmp_path / "trajectory-cached.json")
    again = [call for node in saved.tree.nodes.values() for call in node.calls]
    assert [c.cached_tokens for c in again] == [c.cached_tokens for c in calls]
    assert [r.cached_tokens for r in recorded_replies(saved)] == [c.cached_tokens for c in calls]

    spend = saved.spend()
    assert [a.node_id for a in spend.attempts] == ["0.1", "0.1.1", "0.1.1.1", "0.1.1.1.1"]
    assert [a.spend.calls for a in spend.attempts] == [3, 1, 2, 1]
    assert spend.total.cached_tokens == sum(c.cached_tokens or 0 for c in calls)
    assert spend.total.prompt_tokens == sum(c.prompt_tokens for c in calls)
    assert spend.total.cost_usd == pytest.approx(sum(c.cost_usd or 0 for c in calls))

    row = TargetReport(target="cached", device="cpu", status=TargetStatus.ok)
    row.add_search(saved, None)
    markdown = render_markdown(Report(targets=[row]))
    first, total = spend.attempts[0].spend, spend.total
    share = f"{total.cached_tokens:,} ({total.cached_tokens / total.prompt_tokens:.0%})"
    assert f"| **total** |  |  | 7 | {total.prompt_tokens:,} | {share} |" in markdown
    assert f"| ` 0.1 ` | improve | build\\_error | 3 | {first.prompt_tokens:,} |" in markdown
    assert "| unknown |" not in markdown
    terminal = render_terminal(Report(targets=[row]))
    assert "cached: model calls per attempt" in terminal and share in terminal


def test_a_server_that_does_not_report_its_cache_reads_unknown(tmp_path, fake_openai, monkeypatch):
    """vLLM without --enable-prompt-tokens-details, Ollama, llama.cpp: no prompt_tokens_details.
    The cached count is unknown, not 0, and the cost is the upper bound at the full input rate."""
    fake_openai.push(*(reply(text, prompt_tokens=4000, completion_tokens=100)
                       for text in script(REFERENCE_LINE)))  # fmt: skip
    client = client_for(fake_openai, monkeypatch, **{"fake-model": PRICE})
    trajectory = run_search(tmp_path, client, name="plain", class_name="Model", seed=1)
    calls = [call for node in trajectory.tree.nodes.values() for call in node.calls]
    assert {call.cached_tokens for call in calls} == {None}
    assert [call.cost_usd for call in calls] == [pytest.approx(PRICE.cost_usd(4000, 100))] * 7
    spend = trajectory.spend()
    assert spend.total.cached_tokens is None and spend.total.prompt_tokens == 7 * 4000
    row = TargetReport(target="plain", device="cpu", status=TargetStatus.ok)
    row.add_search(trajectory, None)
    markdown = render_markdown(Report(targets=[row]))
    assert "| **total** |  |  | 7 | 28,000 | unknown | 700 | $0.0616 |" in markdown


@pytest.mark.parametrize(
    ("cached", "price", "expected"),
    [
        (8192, PRICE, ((10_000 - 8192) * 2.0 + 8192 * 0.5 + 100 * 8.0) / 1e6),
        (None, PRICE, (10_000 * 2.0 + 100 * 8.0) / 1e6),  # unknown: the upper bound
        (8192, ModelPrice(input_per_million=2.0, output_per_million=8.0),  # no cached rate
         (10_000 * 2.0 + 100 * 8.0) / 1e6),
    ],
)  # fmt: skip
def test_cached_tokens_are_read_from_the_reply_and_priced(
    fake_openai, monkeypatch, cached, price, expected
):
    fake_openai.push(reply("a", prompt_tokens=10_000, completion_tokens=100, cached_tokens=cached))
    client = client_for(fake_openai, monkeypatch, **{"fake-model": price})
    answer = client.complete([])
    assert answer.cached_tokens == cached and answer.cost_usd == pytest.approx(expected)
    assert answer.notes == []


def test_a_cached_count_past_the_prompt_is_unknown_and_noted(fake_openai, monkeypatch):
    fake_openai.push(reply("a", prompt_tokens=10, cached_tokens=50))
    answer = client_for(fake_openai, monkeypatch, **{"fake-model": PRICE}).complete([])
    assert answer.cached_tokens is None and "not within its 10 prompt tokens" in answer.notes[0]


def test_the_default_prices_have_cached_rates_and_a_config_may_set_one():
    config = LLMConfig(model="gpt-4.1")
    assert config.cost_usd("gpt-4.1", 10**6, 0, cached_tokens=10**6) == pytest.approx(0.5)
    assert config.cost_usd("gpt-4.1-2025-04-14", 10**6, 0, None) == pytest.approx(2.0)
    mine = {"input_per_million": 1.0, "output_per_million": 2.0, "cached_input_per_million": 0.1}
    own = LLMConfig.model_validate({"prices": {"mine": mine}})
    assert own.cost_usd("mine", 1000, 0, cached_tokens=1000) == pytest.approx(0.0001)


def test_spend_sums_are_unknown_when_a_call_that_used_tokens_lacks_them():
    from agents.search.tree import LLMCall

    known = LLMCall(role="coder", temperature=0.1, text="x", prompt_tokens=100,
                    completion_tokens=10, cached_tokens=64, cost_usd=0.01)  # fmt: skip
    unpriced = known.model_copy(update={"cost_usd": None})
    uncached = known.model_copy(update={"cached_tokens": None})
    failed = LLMCall(role="coder", temperature=0.1, text="", error="llm_call_failed: 503")
    assert CallSpend.of([known, failed]) == CallSpend(
        calls=2, prompt_tokens=100, cached_tokens=64, completion_tokens=10, cost_usd=0.01
    )
    assert CallSpend.of([known, unpriced]).cost_usd is None
    assert CallSpend.of([known, uncached]).cached_tokens is None
    assert CallSpend.of([]) == CallSpend()


def test_the_scripted_model_reports_cached_tokens_and_refuses_more_than_the_prompt():
    client = ScriptedClient([ScriptedReply(text="a", prompt_tokens=2000, cached_tokens=1024)])
    assert client.complete([]).cached_tokens == 1024
    assert ScriptedReply(text="a").cached_tokens is None  # unknown unless the script says
    with pytest.raises(ValueError, match="more than `prompt_tokens`"):
        ScriptedReply(text="a", prompt_tokens=10, cached_tokens=11)
