"""The planner's ceiling figures: a share of a ceiling only where it can be true (at most 100%),
the ceiling measured on the kernel's own bytes with the kernel's timer."""

from __future__ import annotations

import re

import pytest

from agents.feedback import CEILING_BELOW_ACHIEVED, node_feedback
from agents.search.tree import Tree
from harness.records import EvalResult, Status, Timings, TimingStats


def stats(ms: float) -> TimingStats:
    return TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms, samples=10)


def tree_with_kernel(
    kernel_ms: float, io_bytes: int, bandwidth: float, flops: int = 0, tflops: float | None = None
) -> Tree:
    tree = Tree.rooted()
    tree.root_ms = 2 * kernel_ms
    result = EvalResult(
        status=Status.ok,
        timings=Timings(candidate=stats(kernel_ms), eager_beside=stats(2 * kernel_ms)),
        io_bytes=io_bytes,
        copy_bandwidth_gbs=bandwidth,
        flops=flops,
        matmul_tflops=tflops,
    )
    tree.add(tree.root, "improve", source="k", result=result)
    return tree


def shares(text: str) -> list[int]:
    return [int(share) for share in re.findall(r"(\d+)% of this device", text)]


# 1 MB in 0.01 ms is 100 GB/s; 1 GFLOP in 0.01 ms is 100 TFLOP/s.
@pytest.mark.parametrize(
    ("bandwidth", "tflops", "expected_shares", "flags"),
    [
        (400.0, 200.0, [25, 50], 0),  # both below their ceilings: shown
        (100.0, 100.0, [100, 100], 0),  # at the ceiling: 100%, still true
        (76.3, 200.0, [50], 1),  # the "131% of copy bandwidth" of issue 26: flagged
        (400.0, 99.0, [25], 1),  # a matmul ceiling a hair low: flagged, not "101%"
        (50.0, 20.0, [], 2),
    ],
)
def test_a_share_over_100_percent_is_flagged_not_shown(bandwidth, tflops, expected_shares, flags):
    tree = tree_with_kernel(0.01, 1_000_000, bandwidth, flops=10**9, tflops=tflops)
    text = node_feedback(tree, tree.nodes["0.1"])
    assert shares(text) == expected_shares
    assert text.count(CEILING_BELOW_ACHIEVED) == flags
    assert "100 GB/s" in text and "100.0 TFLOP/s" in text  # the kernel's own rates stay
    assert "inputs read and its outputs written, once each" in text  # which bytes count
    assert "131%" not in text


def test_the_planner_prompt_never_carries_a_share_over_100_percent():
    from agents.context import Reference
    from agents.llm.client import LLMConfig
    from agents.llm.scripted import ScriptedClient, ScriptedReply
    from agents.team import Team, TeamConfig

    # 131% of the copy bandwidth as the planner was told, and 400% of the matmul rate.
    tree = tree_with_kernel(0.01, 1_000_000, 100 / 1.31, flops=10**9, tflops=25.0)
    client = ScriptedClient([ScriptedReply(text="No plan at all.")] * 2)
    reference = Reference(source="class Model:\n    pass\n", device="cpu")
    team = Team(client, LLMConfig(provider="openai", model="m"), reference, TeamConfig())
    team.propose(tree, tree.nodes["0.1"])
    prompt = "\n".join(message.content for message in client.calls[0].messages)
    assert prompt.count(CEILING_BELOW_ACHIEVED) == 2
    assert all(share <= 100 for share in map(int, re.findall(r"(\d+)%", prompt)))


def test_the_copy_ceiling_moves_the_kernels_bytes_timed_by_the_kernels_timer(monkeypatch):
    import harness.workers.timers as timers
    from harness.devices import CEILING_MIN_REPS, CEILING_WARMUP, copy_bandwidth_gbs

    moved: list[int] = []

    class Recorded(timers.Timer):
        """The harness's timer, reporting 200 ms per call: the rate follows from the bytes."""

        def __call__(self, fn, inputs):
            output = fn(*inputs)
            moved.append(inputs[0].nbytes + output.nbytes)  # read, and written
            assert output.data_ptr() != inputs[0].data_ptr()  # a copy, not the source again
            return timers.Timed(200.0, output, preempted=False)

    monkeypatch.setattr(timers, "Timer", Recorded)
    io_bytes = 3 * 1024 * 1024  # one kernel's inputs plus outputs
    assert copy_bandwidth_gbs("cpu", io_bytes) == pytest.approx(io_bytes / 0.2 / 1e9)
    assert moved == [io_bytes] * (CEILING_WARMUP + CEILING_MIN_REPS)  # past the budget


def test_a_small_copy_is_timed_for_real():
    from harness.devices import copy_bandwidth_gbs

    rate = copy_bandwidth_gbs("cpu", 64 * 1024)
    assert 0 < rate < float("inf")
