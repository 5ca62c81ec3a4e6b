"""The file-served endpoint (bench/file_endpoint.py) with kernelpilot's real ``openai`` client
on loopback: each request becomes files, a reply file written by the test becomes the reply."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import openai
import pytest

from agents.llm.client import LLMCallFailed, LLMConfig, Message
from agents.llm.openai_client import OpenAIChatClient
from bench.file_endpoint import FileEndpoint, serve

MESSAGES = [
    Message(role="system", content="You are one member of kernelpilot's kernel team."),
    Message(role="user", content="# Your role: planner\n\nPlan the next improvement."),
]
WAIT_S = 20.0  # a loaded machine's worst case for a file to appear; never reached when all is well


class Served:
    """An endpoint on a free loopback port, its folder, and its console lines."""

    def __init__(self, folder: Path, **settings: float) -> None:
        self.lines: list[str] = []
        self.endpoint = FileEndpoint(
            folder, model="file-model", settle_s=0.1, poll_s=0.02, say=self.lines.append,
            **settings,
        )  # fmt: skip
        self.server = serve(self.endpoint)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def client(self, **overrides: object) -> OpenAIChatClient:
        settings: dict[str, object] = {"model": "file-model", "base_url": self.base_url,
                                       "api_key_env": "KP_TEST_NO_KEY", "timeout_s": 30.0,
                                       "max_retries": 0} | overrides  # fmt: skip
        return OpenAIChatClient(LLMConfig.model_validate(settings))

    def appeared(self, name: str) -> Path:
        path = self.endpoint.folder / name
        deadline = time.monotonic() + WAIT_S
        while not path.exists():
            assert time.monotonic() < deadline, f"{name} never appeared: {self.lines}"
            time.sleep(0.02)
        return path

    def answer(self, stem: str, text: str, usage: dict | None = None) -> None:
        """As a person or a second model would: the usage first, the reply moved in whole."""
        folder = self.endpoint.folder
        if usage is not None:
            (folder / f"{stem}.usage.json").write_text(json.dumps(usage))
        (folder / f"{stem}.reply.tmp").write_text(text)
        (folder / f"{stem}.reply.tmp").rename(folder / f"{stem}.reply.md")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    monkeypatch.delenv("KP_TEST_NO_KEY", raising=False)  # a local server needs no key
    served = Served(tmp_path / "replies")
    yield served
    served.server.shutdown()
    served.server.server_close()


def in_background(call) -> Future:
    return ThreadPoolExecutor(max_workers=1).submit(call)


def test_a_request_is_written_and_the_reply_file_answers_it(served: Served) -> None:
    pending = in_background(lambda: served.client().complete(MESSAGES, temperature=0.8))
    request = served.appeared("0001-planner.request.md").read_text()
    # A person reads what to write where, then every message whole.
    assert str(served.endpoint.folder / "0001-planner.reply.md") in request
    assert "temperature 0.8" in request and "message 2 of 2: user" in request
    assert MESSAGES[0].content in request and "Plan the next improvement." in request
    body = json.loads(served.appeared("0001-planner.request.json").read_text())
    assert body["messages"] == [message.model_dump() for message in MESSAGES]
    assert any("0001-planner.reply.md" in line for line in served.lines)  # the console says
    served.answer("0001-planner", "Fuse the bias into the GEMM's epilogue.\n")
    reply = pending.result(timeout=WAIT_S)
    assert reply.text == "Fuse the bias into the GEMM's epilogue.\n"
    assert reply.model == "file-model" and reply.finish_reason == "stop"
    # No usage reported: omitted, and the client counts an upper bound and says so.
    assert "no token usage" in reply.notes[0]


def test_usage_is_the_answerers_own_count(served: Served) -> None:
    pending = in_background(lambda: served.client().complete(MESSAGES))
    served.appeared("0001-planner.request.md")
    served.answer("0001-planner", "A plan.", {"prompt_tokens": 1234, "completion_tokens": 56})
    reply = pending.result(timeout=WAIT_S)
    assert (reply.prompt_tokens, reply.completion_tokens, reply.notes) == (1234, 56, [])


def test_requests_are_numbered_by_role_and_a_folder_used_before_goes_on(served: Served) -> None:
    coder = [MESSAGES[0], Message(role="user", content="# Your role: coder\n\nImplement it.")]
    first = in_background(lambda: served.client().complete(coder))
    served.appeared("0001-coder.request.md")
    served.answer("0001-coder", "```python\nclass ModelNew: ...\n```")
    first.result(timeout=WAIT_S)
    again = FileEndpoint(served.endpoint.folder, say=lambda line: None)
    assert again.ask({"messages": [{"role": "user", "content": "hi"}]}) == ("0002-model", True)


def test_a_retry_of_a_waiting_request_joins_it_and_a_fresh_ask_is_new(served: Served) -> None:
    body = {"model": "m", "messages": [message.model_dump() for message in MESSAGES]}
    endpoint = served.endpoint
    assert endpoint.ask(body) == ("0001-planner", True)
    assert endpoint.ask(body) == ("0001-planner", False)  # the client's retry: same files
    endpoint.answered(body, "0001-planner")
    assert endpoint.ask(body, retry=True) == ("0001-planner", False)  # late: the same reply
    assert endpoint.ask(body) == ("0002-planner", True)  # asked afresh: another answer


def test_no_reply_in_time_is_a_504_naming_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("KP_TEST_NO_KEY", raising=False)
    served = Served(tmp_path / "replies", timeout_s=0.3)
    try:
        with pytest.raises(LLMCallFailed) as failed:
            served.client().complete(MESSAGES)
    finally:
        served.server.shutdown()
        served.server.server_close()
    assert "HTTP 504" in str(failed.value) and "0001-planner.reply.md" in str(failed.value)


def test_models_are_listed_and_streaming_is_refused_clearly(served: Served) -> None:
    client = openai.OpenAI(base_url=served.base_url, api_key="unused", max_retries=0)
    assert [model.id for model in client.models.list()] == ["file-model"]
    with pytest.raises(openai.BadRequestError, match="does not stream"):
        client.chat.completions.create(
            model="file-model", messages=[{"role": "user", "content": "hi"}], stream=True
        )


def test_the_summary_counts_the_models_attempts_from_a_saved_trajectory(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from agents.loop import new_trajectory
    from agents.search.config import SearchConfig
    from agents.search.tree import LLMCall
    from bench.__main__ import cli
    from harness.records import Candidate, EvalResult, Problem, Status, Timings, TimingStats
    from harness.timings import Verdict

    def result(status: Status, speedup: float | None = None) -> EvalResult:
        """Eager at 1 ms: the kernel's median is 1/speedup ms (the search ranks by it)."""
        if speedup is None:
            return EvalResult(status=status)
        verdict = Verdict(speedup=speedup, noise_floor=1.05, faster=speedup > 1.05,
                          slower=speedup < 1 / 1.05, needs_review=False)  # fmt: skip
        kernel = TimingStats(median_ms=1 / speedup, iqr_ms=0.0, min_ms=1 / speedup, samples=9)
        return EvalResult(status=status, vs_eager=verdict, timings=Timings(candidate=kernel))

    # Saved on another machine's checkout: matched to the fixed set by the path's tail.
    elsewhere = Path("/elsewhere/kernelpilot/tests/redteam/problems/row_softmax.py")
    problem = Problem(name="row_softmax", source_path=elsewhere, class_name="Model",
                      device="cpu", dtype="float32")  # fmt: skip
    offline = Candidate(id="0.1", parent="0", origin="offline", source="x")
    trajectory = new_trajectory(problem, "a-model", SearchConfig(), 1, offline=offline)
    tree = trajectory.tree
    tree.nodes["0.1"].result = result(Status.ok, 1.38)
    call = LLMCall(role="coder", temperature=0.1, text="", prompt_tokens=100, completion_tokens=7)
    made = [(Status.rejected, None), (Status.rejected, None), (Status.ok, 1.02),
            (Status.build_error, None), (Status.ok, 3.24)]  # fmt: skip
    for status, speedup in made:
        tree.add(tree.root, "improve", source="y", result=result(status, speedup), calls=[call])
    tree.add(tree.root, "improve", failure="no_code: the coder's reply held no module")
    trajectory.save(tmp_path / "out" / "trajectory-row_softmax.json")

    ran = CliRunner().invoke(cli, ["real-model", str(tmp_path / "out"),
                                   "--out", str(tmp_path / "r.json")])  # fmt: skip
    assert ran.exit_code == 0, ran.output
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    [row] = [row for row in rows if row["problem"] == "row_softmax"]
    assert row["attempts"] == 6  # the model's: the offline seed is apart
    assert (row["first_verified"], row["first_faster"]) == (3, 5)  # 1.02x is within the noise
    assert row["gate_rejections"] == 2 and row["rejections_per_attempt"] == pytest.approx(2 / 6)
    assert row["failures"] == {"build_error": 1, "no_candidate": 1, "rejected": 2}
    assert row["best_vs_eager"] == 3.24 and row["offline_seed_vs_eager"] == 1.38
    assert (row["llm_calls"], row["prompt_tokens"], row["completion_tokens"]) == (5, 500, 35)
    not_run = {row["problem"] for row in rows if "not_run" in row}
    assert not_run == {"fused_gelu_block", "swiglu", "layernorm_residual", "linear_relu"}
    assert "| row_softmax | a-model | 6 | attempt 3 | attempt 5 | 2 (0.33) |" in ran.output
