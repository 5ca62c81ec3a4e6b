"""The search's pure parts: which node grows next, budgets, repeats (tables of cases)."""

from __future__ import annotations

import random

import pytest

from agents.loop import grow, new_trajectory
from agents.search.budget import Budget
from agents.search.config import SearchConfig
from agents.search.strategy import EpsilonGreedy, Greedy
from agents.search.tree import Node, Tree
from agents.team import Proposal
from harness.records import Candidate, EvalResult, Problem, Status, Timings, TimingStats

PROBLEM = Problem(name="p", source_path="p.py", class_name="Model", device="cpu", dtype="float32")


def verdict(status: Status, ms: float | None = None) -> EvalResult:
    timing = TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms, samples=10) if ms else None
    return EvalResult(status=status, timings=Timings(candidate=timing))


def tree_with(*children: tuple[str, Status, float | None]) -> Tree:
    tree = Tree.rooted()
    tree.root_ms = 1.0
    for source, status, ms in children:
        tree.add(tree.root, "improve", source=source, result=verdict(status, ms))
    return tree


def source(node: Node) -> str:
    return node.candidate.source if node.candidate else ""


def test_greedy_grows_the_fastest_verified_node():
    tree = tree_with(("a", Status.ok, 0.8), ("b", Status.ok, 0.5), ("c", Status.incorrect, None))
    assert source(Greedy().select(tree)) == "b"
    slow = tree_with(("a", Status.ok, 2.0))
    assert Greedy().select(slow).kind == "root"  # the reference is faster: grow from it


def test_the_root_stops_growing_at_its_cap_and_failed_subtrees_are_given_up():
    tree = tree_with(*[(f"s{n}", Status.ok, 3.0) for n in range(4)])
    assert Greedy(root_children=4).select(tree).kind != "root"
    node = tree.nodes["0.1"]
    for n in range(3):
        tree.add(node, "improve", source=f"f{n}", result=verdict(Status.build_error))
    assert Greedy(root_children=4, prune_after=3).select(tree).id != "0.1"


def test_epsilon_greedy_picks_a_random_leaf_with_a_candidate_or_the_best():
    tree = tree_with(("a", Status.ok, 0.5), ("b", Status.build_error, None))
    always = EpsilonGreedy(random.Random(0), epsilon=1.0)
    picks = {source(always.select(tree)) for _ in range(40)}
    assert picks == {"a", "b"}  # failed leaves too: the debugger repairs them
    never = EpsilonGreedy(random.Random(0), epsilon=0.0)
    assert {source(never.select(tree)) for _ in range(10)} == {"a"}


def test_a_candidate_kernelpilot_failed_on_is_never_sent_to_the_debugger():
    tree = tree_with(("a", Status.harness_error, None), ("b", Status.incorrect, None))
    picks = {source(EpsilonGreedy(random.Random(seed), epsilon=1.0, root_first=0).select(tree))
             for seed in range(20)}  # fmt: skip
    assert picks == {"b"}  # the candidate's own failure is repaired; kernelpilot's is not


def test_whichever_budget_ends_first_ends_the_search():
    assert Budget(attempts=2, spent_attempts=2).exhausted() == "2 attempts"
    assert Budget(max_tokens=100, spent_tokens=150).exhausted() == "100 tokens"
    assert Budget(max_cost_usd=1.0, spent_cost_usd=1.5).exhausted() == (
        "the cost cap of $1.00 per target (spent $1.50)"
    )
    assert Budget(max_seconds=10, spent_seconds=11).exhausted() == "10 s of wall time"
    assert Budget().exhausted() == ""


def test_spend_caps_per_target_per_run_and_for_a_model_without_a_price():
    from agents.search.budget import RunSpend, Spend
    from agents.search.tree import LLMCall

    unpriced = Budget(max_cost_usd=1.0, max_unpriced_tokens=1000, spent_unpriced_tokens=1000)
    assert "1,000 tokens per target for a model without a price" in unpriced.exhausted()
    # Pending calls of the step count: the next call is not made once they reach a cap.
    call = LLMCall(role="coder", temperature=0.1, text="", prompt_tokens=600, completion_tokens=0)
    half = Budget(max_unpriced_tokens=1000, spent_unpriced_tokens=500)
    assert half.spend_cap() == "" and "1,000 tokens" in half.spend_cap(Spend.of([call]))
    # The run's cap holds over its targets: the second target starts with the first's spend.
    run = RunSpend(max_cost_usd=3.0)
    first = Budget(max_cost_usd=5.0)
    before = run.start(first)
    first.charge(Spend(cost_usd=2.5))
    run.finish(first, before)
    second = Budget(max_cost_usd=5.0, spent_cost_usd=0.4)  # a resumed search's earlier spend
    before = run.start(second)
    assert second.exhausted() == ""
    second.charge(Spend(cost_usd=0.2))
    assert second.exhausted() == "the run's cost cap of $3.00 (spent $3.10)"
    run.finish(second, before)
    assert run.spent_cost_usd == pytest.approx(2.7)  # only what the second spent in this run


def test_a_repeated_candidate_is_recorded_and_never_run_again():
    from agents.search.tree import LLMCall

    trajectory = new_trajectory(PROBLEM, "m", SearchConfig(), 1)
    tree = trajectory.tree
    call = LLMCall(role="coder", temperature=0.1, text="x", prompt_tokens=10, completion_tokens=5)
    first = grow(tree, tree.root, Proposal(kind="improve", source="A", calls=[call]), trajectory)
    first.result = verdict(Status.ok, 0.5)
    again = grow(tree, first, Proposal(kind="improve", source="A", calls=[call]), trajectory)
    assert again.result is None and again.failure.startswith("the same candidate as node 0.1")
    assert trajectory.budget.spent_attempts == 2 and trajectory.budget.spent_tokens == 30
    assert trajectory.budget.spent_unpriced_tokens == 30  # no cost given: unpriced


def test_a_node_holds_its_candidate_made_once_and_the_evaluator_gets_it_whole():
    from agents.loop import evaluate_children

    trajectory = new_trajectory(PROBLEM, "m", SearchConfig(), 1)
    tree = trajectory.tree
    plan = "Fuse the bias and the activation into one pass. " * 20
    child = grow(tree, tree.root, Proposal(kind="improve", source="A", plan=plan), trajectory)
    fix = grow(tree, child, Proposal(kind="debug", source="B"), trajectory)
    assert child.candidate == Candidate(
        id="0.1", parent="0", origin="improve", source="A", note=plan[:500]
    )
    assert fix.candidate == Candidate(id="0.1.1", parent="0.1", origin="debug", source="B")
    assert grow(tree, tree.root, Proposal(kind="improve"), trajectory).candidate is None
    seen: list[Candidate] = []

    class Evaluator:
        def evaluate(self, problem, candidate) -> EvalResult:
            seen.append(candidate)
            return verdict(Status.ok, 0.5)

    evaluate_children(PROBLEM, Evaluator(), tree, [child])
    assert len(seen) == 1 and seen[0] is child.candidate


def test_the_first_children_grow_from_the_reference_even_when_a_kernel_is_faster():
    tree = tree_with(("offline", Status.ok, 0.5))  # the offline kernel beats eager
    assert Greedy(root_first=2).select(tree).kind == "root"
    assert EpsilonGreedy(random.Random(0), epsilon=1.0, root_first=2).select(tree).kind == "root"
    tree.add(tree.root, "improve", source="llm", result=verdict(Status.ok, 0.7))
    assert source(Greedy(root_first=2).select(tree)) == "offline"


def test_a_plan_without_markers_is_a_recorded_failure_and_the_coder_still_works(tmp_path):
    from agents.context import Reference
    from agents.llm.client import LLMConfig
    from agents.llm.scripted import ScriptedClient, ScriptedReply
    from agents.team import Team, TeamConfig

    candidate = (
        "Here.\n```python\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n```\n"
    )
    client = ScriptedClient([ScriptedReply(text="Just fuse it all."),
                             ScriptedReply(text="Fuse everything, really."),
                             ScriptedReply(text=candidate)])  # fmt: skip
    reference = Reference(source="class Model:\n    pass\n", device="cpu")
    team = Team(client, LLMConfig(provider="openai", model="m"), reference, TeamConfig())
    proposal = team.propose(Tree.rooted(), Tree.rooted().root)
    assert proposal.failure == "" and proposal.calls[0].error.startswith("no_plan")
    assert "class ModelNew" in proposal.source and "Fuse everything, really." in proposal.plan
    assert [call.role for call in proposal.calls] == ["planner", "planner", "coder"]
    assert client.temperatures == [0.8, 0.8, 0.1]


def test_the_planner_is_told_how_close_the_kernel_is_to_the_devices_ceilings():
    from agents.feedback import node_feedback

    tree = tree_with(("a", Status.ok, 0.5))
    result = tree.nodes["0.1"].result
    result.timings.eager_beside = TimingStats(median_ms=1.0, iqr_ms=0.0, min_ms=1.0, samples=10)
    result.io_bytes, result.copy_bandwidth_gbs = 1_000_000_000, 4000.0  # 1 GB in 0.5 ms
    result.flops, result.matmul_tflops = 10**12, 50.0  # 1 TFLOP in 0.5 ms
    result.time_breakdown = [("fused_kernel", 480.0)]
    result.timings.compiled_beside = TimingStats(median_ms=0.8, iqr_ms=0.0, min_ms=0.8, samples=10)
    result.baseline_breakdowns = {"eager": [("aten::gelu", 900.0)],
                                  "torch.compile": [("triton_poi_fused_gelu_0", 700.0)]}  # fmt: skip
    text = node_feedback(tree, tree.nodes["0.1"])
    assert "2000 GB/s, 50% of this device's measured copy bandwidth" in text
    assert "2.0 TFLOP/s" not in text and "2000.0 TFLOP/s" in text
    assert "480.0 us  fused_kernel" in text
    # what the kernel is up against: each baseline's call, and its rate on the same bytes
    assert "One profiled call of eager, what the kernel is up against" in text
    assert "900.0 us  aten::gelu" in text and "700.0 us  triton_poi_fused_gelu_0" in text
    assert "On the same bytes: eager 1000 GB/s, torch.compile 1250 GB/s." in text
    assert "Device time" not in text  # measured on cuda only
    result.device_us = {"kernelpilot": 480.0, "eager": 900.0, "torch.compile": 700.0}
    text = node_feedback(tree, tree.nodes["0.1"])
    assert (
        "Device time of those calls, kernels summed: kernelpilot 480.0 us, eager 900.0 us, "
        "torch.compile 700.0 us." in text
    )


def test_on_cuda_a_candidate_is_checked_while_the_next_ones_still_build():
    import threading

    from agents.loop import evaluate_children

    first_evaluated = threading.Event()
    order: list[str] = []

    class Evaluator:
        def prebuild(self, problem, candidates) -> None:
            raise AssertionError("on cuda the builds are not all awaited first")

        def build(self, problem, candidate) -> None:
            if candidate.source == "B":  # still building while A is checked and timed
                assert first_evaluated.wait(timeout=10), "A waited for B's build"
            order.append(f"built {candidate.source}")

        def evaluate(self, problem, candidate) -> EvalResult:
            order.append(f"evaluated {candidate.source}")
            first_evaluated.set()
            return verdict(Status.ok, 0.5)

    gpu = PROBLEM.model_copy(update={"device": "cuda"})
    tree = Tree.rooted()
    children = [tree.add(tree.root, "improve", source=source) for source in ("A", "B")]
    evaluate_children(gpu, Evaluator(), tree, children)
    assert order == ["built A", "evaluated A", "built B", "evaluated B"]


def test_the_search_has_one_eager_baseline_the_median_of_its_runs():
    def run(kernel_ms: float, eager_ms: float, compiled_ms: float | None = None) -> EvalResult:
        stats = lambda ms: TimingStats(median_ms=ms, iqr_ms=0.0, min_ms=ms * 0.9, samples=9)  # noqa: E731
        compiled = stats(compiled_ms) if compiled_ms else None
        timings = Timings(candidate=stats(kernel_ms), eager_beside=stats(eager_ms),
                          compiled_beside=compiled)  # fmt: skip
        return EvalResult(status=Status.ok, timings=timings)

    tree = Tree.rooted()
    tree.root_ms = 5.0  # the loop's latest eager median: only where no run holds one
    assert tree.baseline().eager_ms is None and tree.score(tree.root) == 5.0
    for kernel_ms, eager_ms, compiled_ms in [(0.5, 1.0, 0.8), (0.4, 3.0, None), (0.6, 0.9, 0.6)]:
        tree.add(tree.root, "improve", source=f"k{kernel_ms}",
                 result=run(kernel_ms, eager_ms, compiled_ms))  # fmt: skip
    tree.add(tree.root, "improve", source="bad", result=verdict(Status.incorrect))
    baseline = tree.baseline()
    assert (baseline.eager_ms, baseline.measurements) == (1.0, 3)  # 3.0 was one slow run
    assert baseline.eager_min_ms == pytest.approx(0.81) and baseline.compiled_ms == 0.7
    assert tree.score(tree.root) == 1.0  # the reference competes with the one baseline


def test_the_planner_is_told_the_layouts_the_kernels_names_say():
    """KernelBench level 2 54 on an H200 (bench/BENCHMARKS.md, section 25): eager and the
    candidate pay cuDNN's conversions around an NHWC convolution, torch.compile does not."""
    from agents.feedback import node_feedback

    conv = ("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_tilesize128x64x32_"
            "warpgroupsize1x1x1_g1_execute_segment_k")  # fmt: skip
    to_nhwc = "void cudnn::engines_precompiled::nchwToNhwcKernel<float, float, float, false, true>"
    to_nchw = "void cudnn::engines_precompiled::nhwcToNchwKernel<float, float, float, true, false>"
    tree = tree_with(("a", Status.ok, 0.8))
    result = tree.nodes["0.1"].result
    result.time_breakdown = [(conv, 1214.3), (to_nhwc, 627.0), (to_nchw, 564.3),
                             ("void fused_0_rowwise<float, 4>(float const*)", 511.9)]  # fmt: skip
    result.baseline_breakdowns = {
        "torch.compile": [(conv, 1216.2), ("triton_poi_fused_convolution_gelu_leaky_relu_mul_2",
                                           564.3), ("triton_poi_fused_convolution_0", 515.8)],
    }  # fmt: skip
    text = node_feedback(tree, tree.nodes["0.1"])
    assert (
        "Layouts, as the kernels' names say: the convolution runs NHWC; layout conversions take "
        "1191.3 us (NCHW to NHWC 627.0 us, NHWC to NCHW 564.3 us)." in text
    )
    assert (
        "Layouts, as the kernels' names say: the convolution runs NHWC; no layout conversion "
        "kernel." in text
    )
    result.time_breakdown = [("void fused_0_fast<float, 4, true>(float const*)", 10.0)]
    text = node_feedback(tree, tree.nodes["0.1"])
    own = text.split("One profiled call (")[1].split("One profiled call of")[0]
    assert "fused_0_fast" in own and "Layouts" not in own  # names that say no layout: no line
