"""The LLM access layer: the real openai client against a loopback server, and the scripted one.

Retry waits are kept short with ``retry-after`` (which the retries honour, as the openai client
would) and ``max_retries`` of 1-2; only the tests that prove a wait happened wait for real.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agents.llm import (
    Deadline,
    LLMCallFailed,
    LLMConfig,
    LLMDeadlineReached,
    LLMFatalError,
    Message,
    ModelPrice,
    ScriptedClient,
    ScriptedReply,
    make_client,
)
from agents.llm.client import OPENAI_BASE_URL
from agents.llm.openai_client import OpenAIChatClient
from harness.errors import UserError
from tests.fake_openai import (
    FakeOpenAI,
    closed_port_url,
    empty_choices,
    error,
    hang,
    malformed,
    max_tokens_unsupported,
    megabyte_reply,
    model_not_found,
    rate_limited,
    reply,
    server_error,
    slow,
    temperature_unsupported,
    unauthorized,
)

KEY_ENV = "KP_TEST_OPENAI_KEY"
KEY = "sk-test-0123456789abcdefSECRET"
MESSAGES = [
    Message(role="system", content="You write fused kernels."),
    Message(role="user", content="Fuse gelu into the matmul epilogue."),
]
SLACK_S = 2.0  # past a deadline: the end of a timed-out request, on a loaded machine


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


def config_for(base_url: str, **overrides: object) -> LLMConfig:
    settings: dict[str, object] = {
        "model": "fake-model",
        "base_url": base_url,
        "api_key_env": KEY_ENV,
        "timeout_s": 5.0,
        "max_retries": 2,
        "prices": {"fake-model": ModelPrice(input_per_million=2.0, output_per_million=8.0)},
    }
    settings.update(overrides)
    return LLMConfig.model_validate(settings)


def client_for(base_url: str, **overrides: object) -> OpenAIChatClient:
    return OpenAIChatClient(config_for(base_url, **overrides))


def test_reply_tokens_cost_and_request(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(reply("hello", prompt_tokens=1000, completion_tokens=500))
    result = client_for(fake_openai.base_url).complete(MESSAGES, temperature=0.8)
    assert (result.text, result.model, result.finish_reason) == ("hello", "fake-model", "stop")
    assert (result.prompt_tokens, result.completion_tokens) == (1000, 500)
    assert result.cost_usd == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    assert result.attempts == 1 and 0 < result.seconds < 5 and result.notes == []
    [request] = fake_openai.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "fake-model"
    assert request.body["messages"] == [m.model_dump() for m in MESSAGES]
    assert request.body["temperature"] == 0.8
    assert request.body["max_tokens"] == 8192  # max_output_tokens when the caller gives none
    assert "reasoning_effort" not in request.body and "max_completion_tokens" not in request.body


def test_unpriced_model_costs_unknown_and_missing_usage_is_noted(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(
        reply("a", model="local-llama"),
        reply("b", usage=False),
        reply("c", model="fake-model-2024-08-06", prompt_tokens=10**6, completion_tokens=0),
    )
    client = client_for(fake_openai.base_url, model="local-llama", prices={})
    assert client.complete(MESSAGES).cost_usd is None
    no_usage = client.complete(MESSAGES)
    # No usage: counted as an upper bound (a byte per token, the output limit), never as 0.
    prompt_bytes = sum(len(message.content.encode()) for message in MESSAGES)
    assert no_usage.prompt_tokens >= prompt_bytes and no_usage.completion_tokens == 8192
    assert no_usage.cost_usd is None  # local-llama has no price
    assert "no token usage" in no_usage.notes[0] and "upper bound" in no_usage.notes[0]
    priced = client_for(fake_openai.base_url)  # a dated snapshot is priced as its model
    assert priced.complete(MESSAGES).cost_usd == pytest.approx(2.0)


def test_rate_limit_is_retried_after_the_servers_retry_after(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(rate_limited(retry_after_s=1.0), reply("ok"))
    result = client_for(fake_openai.base_url).complete(MESSAGES)
    assert (result.text, result.attempts) == ("ok", 2)
    first, second = fake_openai.requests
    # The client's own first backoff is at most 0.5 s: waiting 1 s means retry-after was read.
    assert second.at - first.at >= 0.95 and result.seconds >= 0.95


def test_server_errors_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(server_error(500), server_error(500), reply("ok"))
    result = client_for(fake_openai.base_url).complete(MESSAGES)
    assert (result.text, result.attempts) == ("ok", 3)
    retry_counts = [r.headers["x-stainless-retry-count"] for r in fake_openai.requests]
    assert retry_counts == ["0", "1", "2"]


def test_without_retry_after_the_client_backs_off(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(server_error(503, retry_after_s=None), reply("ok"))
    result = client_for(fake_openai.base_url).complete(MESSAGES)
    first, second = fake_openai.requests
    assert result.attempts == 2
    assert second.at - first.at >= 0.5 * 0.75  # 0.5 s initial delay, at most 25% jitter off


def test_timeout_then_success(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(slow(3.0), reply("ok"))
    result = client_for(fake_openai.base_url, timeout_s=0.3).complete(MESSAGES)
    assert (result.text, result.attempts) == ("ok", 2)


def test_retries_exhausted_name_endpoint_and_model(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(*[server_error(503)] * 3)
    with pytest.raises(LLMCallFailed) as caught:
        client_for(fake_openai.base_url).complete(MESSAGES)
    message = str(caught.value)
    assert "503" in message and fake_openai.base_url in message and "fake-model" in message
    assert caught.value.attempts == 3 and len(fake_openai.requests) == 3


def test_timeouts_exhausted(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(slow(3.0), slow(3.0))
    with pytest.raises(LLMCallFailed, match="timeout_s=0.2") as caught:
        client_for(fake_openai.base_url, timeout_s=0.2, max_retries=1).complete(MESSAGES)
    assert caught.value.attempts == 2


def test_an_endpoint_never_reached_is_fatal_with_the_url_and_the_os_reason() -> None:
    base_url = closed_port_url()
    with pytest.raises(LLMFatalError) as caught:
        client_for(base_url, max_retries=1).complete(MESSAGES)
    err = caught.value
    assert isinstance(err, UserError) and err.attempts == 2  # retried, then given up for the run
    assert f"cannot reach the LLM endpoint {base_url}" in err.what
    assert "Connection refused" in err.what and "base_url" in err.fix


def test_an_endpoint_gone_after_it_answered_fails_only_the_call() -> None:
    with FakeOpenAI() as server:
        server.push(reply("first"))
        client = client_for(server.base_url, max_retries=1)
        assert client.complete(MESSAGES).text == "first"
    with pytest.raises(LLMCallFailed, match="cannot reach") as caught:
        client.complete(MESSAGES)  # the server has stopped: its port refuses
    assert not isinstance(caught.value, LLMFatalError) and caught.value.attempts == 2
    assert "Connection refused" in str(caught.value) and server.base_url in str(caught.value)


# --- deadlines and progress (issue 23) ------------------------------------------------------


def deadline_in(seconds: float) -> Deadline:
    return Deadline(at=time.monotonic() + seconds, what=f"the search's --max-time of {seconds:g} s")


def test_a_deadline_ends_a_hanging_request_and_stops_the_retries(fake_openai) -> None:
    fake_openai.push(hang(), reply("never"))
    client = client_for(fake_openai.base_url, timeout_s=60.0, max_retries=2)
    with pytest.raises(LLMDeadlineReached) as caught:
        client.complete(MESSAGES, deadline=deadline_in(1.0), role="planner")
    err = caught.value
    assert "the search's --max-time of 1 s ran out during the planner's call" in err.what
    assert "--max-time" in err.fix and fake_openai.base_url in err.where
    assert err.attempts == 1 and len(fake_openai.requests) == 1  # no retry past the deadline
    assert err.seconds <= 1.0 + SLACK_S  # not timeout_s = 60


def test_no_retry_starts_whose_wait_would_pass_the_deadline(fake_openai) -> None:
    fake_openai.push(rate_limited(retry_after_s=30.0), reply("too late"))
    client = client_for(fake_openai.base_url)
    with pytest.raises(LLMDeadlineReached, match="too little to retry") as caught:
        client.complete(MESSAGES, deadline=deadline_in(5.0), role="coder")
    assert "429" in str(caught.value) and "would wait 30.0 s" in str(caught.value)
    assert len(fake_openai.requests) == 1 and caught.value.seconds < 5.0


def test_a_passed_deadline_sends_nothing(fake_openai) -> None:
    with pytest.raises(LLMDeadlineReached, match="ran out before the debugger's call") as caught:
        client_for(fake_openai.base_url).complete(
            MESSAGES, deadline=deadline_in(-1.0), role="debugger"
        )
    assert caught.value.attempts == 0 and fake_openai.requests == []


def test_progress_names_each_attempt_and_each_retry_wait(fake_openai) -> None:
    fake_openai.push(server_error(503, retry_after_s=0.2), reply("ok"))
    lines: list[str] = []
    client = OpenAIChatClient(config_for(fake_openai.base_url), progress=lines.append)
    assert client.complete(MESSAGES, deadline=deadline_in(60.0), role="planner").text == "ok"
    asking = f"planner: asking fake-model at {fake_openai.base_url}"
    assert lines[0].startswith(f"{asking} (attempt 1 of 3, ") and lines[0].endswith(" s left)")
    assert lines[1] == (
        "planner: the endpoint answered 503 (The server had an error while processing your "
        "request.); retrying in 0.2 s"
    )
    assert lines[2].startswith(f"{asking} (attempt 2 of 3, ") and len(lines) == 3


def test_a_heartbeat_while_the_endpoint_thinks(fake_openai) -> None:
    fake_openai.push(slow(1.0))
    lines: list[str] = []
    client = OpenAIChatClient(
        config_for(fake_openai.base_url), progress=lines.append, heartbeat_s=0.2
    )
    client.complete(MESSAGES, role="coder")
    beats = [line for line in lines if line.startswith("coder: still waiting on the endpoint: ")]
    assert beats and lines[-1] == beats[-1]  # from the request's start to its reply, not after
    assert lines[0] == f"coder: asking fake-model at {fake_openai.base_url} (attempt 1 of 3)"


def test_a_failed_call_says_why_on_the_progress_output(fake_openai) -> None:
    fake_openai.push(*[server_error(502)] * 2)
    lines: list[str] = []
    client = OpenAIChatClient(config_for(fake_openai.base_url, max_retries=1), lines.append)
    with pytest.raises(LLMCallFailed):
        client.complete(MESSAGES, role="debugger")
    assert lines[-1].startswith("debugger: the call failed: HTTP 502 after 2 attempts: The server")
    assert fake_openai.base_url in lines[-1] and KEY not in "".join(lines)


def test_the_scripted_client_keeps_its_reply_past_a_deadline() -> None:
    client = ScriptedClient([ScriptedReply(text="plan")])
    with pytest.raises(LLMDeadlineReached, match="before the planner's call"):
        client.complete(MESSAGES, deadline=deadline_in(-1.0), role="planner")
    assert client.remaining == 1
    assert client.complete(MESSAGES, deadline=deadline_in(60.0), role="planner").text == "plan"


@pytest.mark.parametrize("behaviour", [unauthorized(), error(403, f"Key {KEY} is not allowed")])
def test_auth_error_is_fatal_at_once_without_the_key(fake_openai, behaviour) -> None:
    fake_openai.push(behaviour, reply("never"))
    with pytest.raises(LLMFatalError) as caught:
        client_for(fake_openai.base_url).complete(MESSAGES)
    err = caught.value
    assert isinstance(err, UserError) and err.attempts == 1 and len(fake_openai.requests) == 1
    assert KEY not in str(err) and "sk-test" not in str(err) and "SECRET" not in str(err)
    assert KEY_ENV in err.fix and fake_openai.base_url in str(err)
    assert KEY in json.dumps(fake_openai.requests[0].headers)  # the key was sent, only not shown


def test_unknown_model_is_fatal(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(model_not_found("no-such-model"))
    with pytest.raises(LLMFatalError) as caught:
        client_for(fake_openai.base_url, model="no-such-model").complete(MESSAGES)
    assert "no-such-model" in caught.value.what and "/v1" in caught.value.fix
    assert caught.value.attempts == 1


def test_quota_exhausted_is_fatal(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(
        error(
            429,
            "You exceeded your current quota, please check your plan.",
            type_="insufficient_quota",
            code="insufficient_quota",
        )
    )
    with pytest.raises(LLMFatalError, match="quota"):
        client_for(fake_openai.base_url).complete(MESSAGES)
    assert len(fake_openai.requests) == 1  # no retry can mend it


def test_context_too_long_fails_only_the_call(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(
        error(
            400,
            "This model's maximum context length is 128000 tokens.",
            param="messages",
            code="context_length_exceeded",
        )
    )
    with pytest.raises(LLMCallFailed, match="maximum context length") as caught:
        client_for(fake_openai.base_url).complete(MESSAGES)
    assert caught.value.attempts == 1


@pytest.mark.parametrize("bad", [empty_choices, malformed])
def test_bad_200_is_asked_again(fake_openai: FakeOpenAI, bad) -> None:
    fake_openai.push(bad(), reply("ok"))
    result = client_for(fake_openai.base_url, max_retries=1).complete(MESSAGES)
    assert (result.text, result.attempts) == ("ok", 2)


@pytest.mark.parametrize(("bad", "said"), [(empty_choices, "no choices"), (malformed, "not JSON")])
def test_bad_200_until_retries_run_out(fake_openai: FakeOpenAI, bad, said) -> None:
    fake_openai.push(bad(), bad(), reply("too late"))
    with pytest.raises(LLMCallFailed, match=said) as caught:
        client_for(fake_openai.base_url, max_retries=1).complete(MESSAGES)
    assert caught.value.attempts == 2 and "fake-model" in str(caught.value)


def test_temperature_refused_is_dropped_and_remembered(fake_openai, caplog) -> None:
    fake_openai.push(temperature_unsupported(0.1), reply("a"), reply("b"))
    client = client_for(fake_openai.base_url)
    with caplog.at_level(logging.WARNING, logger="agents.llm.openai_client"):
        first = client.complete(MESSAGES, temperature=0.1)
        second = client.complete(MESSAGES, temperature=0.8)
    assert (first.text, first.attempts, second.text, second.attempts) == ("a", 2, "b", 1)
    assert "temperature" in first.notes[0] and second.notes == []
    sent = fake_openai.bodies
    assert sent[0]["temperature"] == 0.1
    assert "temperature" not in sent[1] and "temperature" not in sent[2]
    assert len([r for r in caplog.records if "temperature" in r.getMessage()]) == 1


def test_max_tokens_refused_switches_to_max_completion_tokens(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(max_tokens_unsupported(), reply("a"), reply("b"))
    client = client_for(fake_openai.base_url)
    client.complete(MESSAGES, max_tokens=100)
    client.complete(MESSAGES)
    first, retried, later = fake_openai.bodies
    assert first["max_tokens"] == 100 and "max_completion_tokens" not in first
    assert retried["max_completion_tokens"] == 100 and "max_tokens" not in retried
    assert later["max_completion_tokens"] == 8192 and "max_tokens" not in later


def test_reasoning_effort_sent_only_when_configured(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(reply(), reply())
    client_for(fake_openai.base_url, reasoning_effort="low").complete(MESSAGES)
    client_for(fake_openai.base_url).complete(MESSAGES)
    assert fake_openai.bodies[0]["reasoning_effort"] == "low"
    assert "reasoning_effort" not in fake_openai.bodies[1]


def test_reasoning_effort_refused_is_fatal(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(error(400, "Unrecognized request argument supplied: reasoning_effort"))
    with pytest.raises(LLMFatalError, match="reasoning_effort"):
        client_for(fake_openai.base_url, reasoning_effort="high").complete(MESSAGES)


def test_megabyte_reply(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(megabyte_reply(1 << 20))
    assert len(client_for(fake_openai.base_url).complete(MESSAGES).text) == 1 << 20


def test_base_url_without_v1_and_no_key_for_a_local_server(fake_openai, monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    fake_openai.push(reply("local"))
    root = fake_openai.base_url.removesuffix("/v1")  # llama.cpp serves /chat/completions too
    assert client_for(root).complete(MESSAGES).text == "local"
    assert fake_openai.requests[0].path == "/chat/completions"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer no-key"


def test_no_key_for_openai_is_fatal_before_any_call(monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(LLMFatalError, match=KEY_ENV):
        client_for(OPENAI_BASE_URL)


def test_config_defaults_and_environment(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    config = LLMConfig()
    assert config.base_url == OPENAI_BASE_URL and config.api_key_env == "OPENAI_API_KEY"
    assert [config.temperature_for(role) for role in ("planner", "coder", "debugger")] == [
        0.8,
        0.1,
        0.1,
    ]
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:11434/v1")
    assert LLMConfig().base_url == "http://localhost:11434/v1"
    assert KEY not in LLMConfig(api_key_env=KEY_ENV).model_dump_json()
    with pytest.raises(ValueError, match="script"):
        LLMConfig(provider="scripted")


def write_script(directory: Path, entries: list[dict[str, object]]) -> Path:
    path = directory / "replies.json"
    path.write_text(json.dumps(entries))
    return path


def test_scripted_replays_in_order_and_records_temperatures(tmp_path: Path) -> None:
    (tmp_path / "candidates").mkdir()
    (tmp_path / "candidates" / "fused.py").write_text("class ModelNew: ...\n")
    script = write_script(
        tmp_path,
        [
            {"role": "planner", "text": "plan", "prompt_tokens": 900, "completion_tokens": 120},
            {"role": "coder", "file": "candidates/fused.py"},
            {"role": "debugger", "error": "call_failed", "text": "HTTP 503"},
        ],
    )
    client = make_client(LLMConfig(provider="scripted", script=script))
    assert isinstance(client, ScriptedClient)
    plan = client.complete(MESSAGES, temperature=0.8)
    code = client.complete(MESSAGES, temperature=0.1, max_tokens=50)
    assert (plan.text, plan.prompt_tokens, plan.completion_tokens) == ("plan", 900, 120)
    assert code.text == "class ModelNew: ...\n" and code.cost_usd is None
    with pytest.raises(LLMCallFailed, match="HTTP 503"):
        client.complete(MESSAGES, temperature=0.1)
    with pytest.raises(LLMCallFailed, match="script exhausted"):
        client.complete(MESSAGES)
    assert client.temperatures == [0.8, 0.1, 0.1]
    assert [call.role for call in client.calls] == ["planner", "coder", "debugger"]
    assert client.calls[1].max_tokens == 50 and client.remaining == 0


def test_scripted_json_lines_and_bad_scripts(tmp_path: Path) -> None:
    lines = tmp_path / "replies.jsonl"
    lines.write_text('{"text": "one"}\n\n{"text": "two", "error": "fatal"}\n')
    client = ScriptedClient.from_file(lines)
    assert client.complete(MESSAGES).text == "one"
    with pytest.raises(LLMFatalError, match="two"):
        client.complete(MESSAGES)
    with pytest.raises(LLMFatalError, match="reply 1") as caught:
        ScriptedClient.from_file(write_script(tmp_path, [{"text": "a"}, {"file": "missing.py"}]))
    assert "relative to the script" in caught.value.fix
    with pytest.raises(LLMFatalError, match="exactly one"):
        ScriptedClient.from_file(write_script(tmp_path, [{"role": "coder"}]))
    with pytest.raises(LLMFatalError, match="not JSON"):
        lines.write_text("[{")
        ScriptedClient.from_file(lines)


def test_make_client_openai(fake_openai: FakeOpenAI) -> None:
    config = LLMConfig(model="fake-model", base_url=fake_openai.base_url, api_key_env=KEY_ENV)
    assert isinstance(make_client(config), OpenAIChatClient)


def test_reply_without_text_is_noted(fake_openai: FakeOpenAI) -> None:
    fake_openai.push(reply(None, finish_reason="length"))
    result = client_for(fake_openai.base_url).complete(MESSAGES)
    assert (result.text, result.finish_reason) == ("", "length")
    assert "max_output_tokens" in result.notes[0]


def test_fake_server_is_bounded() -> None:
    with FakeOpenAI(lifetime_s=0.3) as server:
        request = urllib.request.Request(f"{server.base_url}/chat/completions", data=b"{}")
        with pytest.raises(urllib.error.HTTPError, match="500"):  # nothing queued: says so
            urllib.request.urlopen(request, timeout=5)
        time.sleep(0.5)  # past its lifetime: it has shut itself down
        with pytest.raises(urllib.error.URLError):
            urllib.request.urlopen(request, timeout=5)
