"""What the roles are shown of the search, asserted on the rendered prompts: one baseline for
every listed speedup, medians and fastest calls, how "best" is ranked, the noise floor, the
tolerance and the machine; the profiling block labelled with its kernel; failed attempts from
anywhere in the tree with their reasons; shared code shown once, so that prompts do not grow
with each step of a search."""

from __future__ import annotations

import re
from pathlib import Path

from agents.context import KernelSummary, Reference
from agents.listing import ShownCode
from agents.llm.client import LLMConfig, Reply
from agents.loop import new_trajectory, search
from agents.search.config import SearchConfig
from agents.search.tree import LLMCall, Node, Tree
from agents.team import Team, TeamConfig
from harness.judge.accept import accept
from harness.machine import CpuCache, Machine
from harness.records import Candidate, Check, EvalResult, Problem, Status, Timings, TimingStats

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = (ROOT / "examples" / "fused_gelu_block.py").read_text()
EXAMPLE = (ROOT / "examples" / "candidates" / "fused_gelu_block_cpu.py").read_text()
CPU = Machine(device="cpu", name="Test CPU 9000", cpus=8, isa=["avx2", "fma", "avx512f"],
              caches=[CpuCache(name="L1d", size_kib=48, shared_by=1),
                      CpuCache(name="L3", size_kib=32768, shared_by=8)])  # fmt: skip
GPU = Machine(device="cuda", name="NVIDIA H100 80GB HBM3", capability="9.0", sms=132,
              shared_per_block_kib=48, shared_per_block_optin_kib=227, shared_per_sm_kib=228,
              registers_per_sm=65536, threads_per_sm=2048, l2_mib=50.0, memory_gib=79.1)  # fmt: skip
REF = Reference(source=REFERENCE, device="cpu", atol=1e-3, machine=CPU)
PROBLEM = Problem(name="gelu", source_path=ROOT / "examples" / "fused_gelu_block.py")
# A helper library like the offline proposer's: thousands of characters every kernel carries.
HELPER = "\n".join(f"inline float kp_helper_{n}(float x) {{ return x * {n}.0f + 1.0f; }}"
                   for n in range(300))  # fmt: skip
HELPER_LINE = "inline float kp_helper_299(float x)"
BEGINS, ENDS = "<<<IMPROVE BEGINS>>>", "<<<IMPROVE ENDS>>>"


def stats(median: float) -> TimingStats:
    return TimingStats(median_ms=median, iqr_ms=median * 0.02, min_ms=median * 0.9, samples=50)


def timed(kernel_ms: float, eager_ms: float, compiled_ms: float | None = None) -> EvalResult:
    """A verified result whose run timed eager at ``eager_ms`` beside the kernel."""
    timings = Timings(candidate=stats(kernel_ms), eager_beside=stats(eager_ms),
                      compiled_beside=stats(compiled_ms) if compiled_ms else None)  # fmt: skip
    result = EvalResult(status=Status.ok, timings=timings)
    result.vs_eager = accept(stats(kernel_ms), stats(eager_ms))
    if compiled_ms:
        result.vs_compile = accept(stats(kernel_ms), stats(compiled_ms))
    return result


def failed(status: Status, reason: str, check: str = "") -> EvalResult:
    checks = [Check(name=check, passed=False, detail=reason)] if check else []
    return EvalResult(status=status, reason=reason, checks=checks)


HELPER_COMMENT = "\n".join(f"# {line}" for line in HELPER.splitlines())


def kernel(tag: str) -> str:
    """A candidate carrying HELPER, different from its kin in one line."""
    return EXAMPLE.replace(
        "import torch\n", f"import torch  # variant {tag}\n{HELPER_COMMENT}\n", 1
    )


class Client:
    """Answers each role from its prompt: a span from the selected kernel, that kernel with
    one line changed. Records every prompt."""

    def __init__(self) -> None:
        self.prompts: list[tuple[str, str]] = []

    def complete(self, messages, *, temperature=None, max_tokens=None, deadline=None, role=None):
        prompt = messages[-1].content
        self.prompts.append((role, prompt))
        code = selected_code(prompt)
        if role == "planner":
            line = [line for line in code.splitlines() if "return" in line][-1]
            text = f"Tile it.\n{BEGINS}\n{line}\n{ENDS}\nUse a larger tile.\n"
        else:
            base = code if "class ModelNew" in code else kernel("0")
            text = f"```python\n{base}\n# call {len(self.prompts)}\n```\n"
        return Reply(text=text, model="m", prompt_tokens=1, completion_tokens=1, cost_usd=None,
                     finish_reason="stop", seconds=0.0, attempts=1)  # fmt: skip


BLOCK = re.compile(r'<data id="(\w+)" kind="([^"]*)">\n(`{3,})(\w*)\n(.*?)\n\3\n</data id="\1">',
                   re.S)  # fmt: skip


def selected_code(prompt: str) -> str:
    heading = re.search(r"^## The (selected kernel|failed candidate) ", prompt, re.M)
    assert heading, "no selected kernel in the prompt"
    return next(m.group(5) for m in BLOCK.finditer(prompt, heading.end()) if m.group(4) == "python")


class Evaluator:
    """Answers from a table; eager is re-measured (differently) in every candidate's run."""

    deadline = None
    OUTCOMES = [(0.80, 1.0), None, (0.62, 1.3), "rejected", (0.70, 0.9), (0.55, 1.1)]

    def __init__(self) -> None:
        self.runs = 0

    def prebuild(self, problem, candidates) -> None: ...

    def parallel(self, problem) -> int:
        return 1

    def build(self, problem, candidate) -> None: ...

    def evaluate(self, problem: Problem, candidate: Candidate) -> EvalResult:
        outcome = self.OUTCOMES[self.runs % len(self.OUTCOMES)]
        self.runs += 1
        if outcome is None:
            return failed(Status.build_error, "error: 'vfloat' was not declared in this scope")
        if outcome == "rejected":
            return failed(Status.rejected, "line 3: imports os", "static_gate")
        return timed(*outcome, compiled_ms=0.7)


def run_search(steps: int, folder: Path) -> Client:
    client = Client()
    team = Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig())
    config = SearchConfig(strategy="greedy", attempts=steps + 1, max_cost_usd=None,
                          max_unpriced_tokens=None)  # fmt: skip
    offline = Candidate(source=kernel("offline"), origin="offline")
    trajectory = new_trajectory(PROBLEM, "m", config, 0, offline)
    search(PROBLEM, Evaluator(), team, trajectory, folder / "t.json", config, lambda _: None)
    return client


def add(tree: Tree, parent: Node, source: str, result: EvalResult | None) -> Node:
    node = tree.add(parent, "improve", source=source)
    node.result = result
    return node


def speedups(prompt: str) -> dict[str, str]:
    return dict(re.findall(r"^### Kernel (\S+): ok, .*?, (\d+\.\d+x) vs eager", prompt, re.M))


# --- one baseline, and what a kernel's numbers mean ---------------------------------------


def test_every_listed_speedup_is_against_the_one_baseline_and_ranks_as_medians_do():
    tree = Tree.rooted()
    first = add(tree, tree.root, kernel("a"), timed(0.80, 1.0, 0.7))
    second = add(tree, first, kernel("b"), timed(0.50, 2.0, 0.7))  # eager ran slow beside it
    add(tree, first, kernel("c"), timed(0.60, 0.9, 0.7))
    assert tree.baseline().eager_ms == 1.0 and tree.baseline().measurements == 3
    client = Client()
    Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig()).propose(tree, first)
    planner = client.prompts[0][1]
    assert planner.count("- Baseline: eager 1 ms per call (the median of 3 measurements") == 1
    # One baseline: 1.0 ms over each median, not each run's own eager (0.5 ms beside 2.0 ms
    # would read 4.00x and rank above kernels that are faster).
    assert speedups(planner) == {"0.1": "1.25x", "0.1.1": "2.00x", "0.1.2": "1.67x"}
    assert "4.00x" not in planner.split("## Profiling feedback")[0]
    assert "median 0.5 ms (fastest call 0.45 ms)" in planner
    assert f"- Best so far: kernel {second.id}, median 0.5 ms, 2.00x vs eager." in planner
    assert "ranked by their median time per call" in planner
    assert "clears the run's noise floor: at least 5%, at least 15% for work under 10 us" in planner
    assert "faster than eager beyond its run's noise floor of 5%" in planner
    assert "slower than torch.compile beyond the noise" in planner  # 0.8 ms against 0.7 ms


def test_the_tolerance_and_the_machine_are_in_every_role_prompt():
    tree = Tree.rooted()
    good = add(tree, tree.root, kernel("a"), timed(0.5, 1.0))
    broken = add(tree, good, kernel("b"), failed(Status.incorrect, "max error 0.3"))
    client = Client()
    team = Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig())
    team.propose(tree, good)
    team.propose(tree, broken)
    roles = {role for role, _ in client.prompts}
    assert roles == {"planner", "coder", "debugger"}
    for role, prompt in client.prompts:
        assert "|out - ref| <= 0.001 * rms(ref) + 0.0001 * |ref|" in prompt, role
        assert "||out - ref|| / ||ref|| <= 2e-05" in prompt, role
        assert "Test CPU 9000, 8 logical CPUs" in prompt and "avx2, fma, avx512f" in prompt
        assert "L1d 48 KiB per CPU, L3 32 MiB per 8 CPUs" in prompt


def test_a_gpu_is_described_by_its_architecture_and_limits():
    from agents.roles.view_text import setting_text

    text = setting_text(REF.model_copy(update={"device": "cuda", "machine": GPU}))
    assert "NVIDIA H100 80GB HBM3, compute capability 9.0: 132 SMs" in text
    assert "48 KiB per block (227 KiB with the opt-in attribute), 228 KiB per SM" in text
    assert "L2 cache 50.0 MiB" in text


# --- the profiling block and the headings -------------------------------------------------


def test_the_profile_is_labelled_with_the_kernel_it_belongs_to():
    tree = Tree.rooted()
    best = add(tree, tree.root, kernel("a"), timed(0.25, 1.0))
    best.result.time_breakdown = [("kp_fused_kernel", 123.0)]
    client = Client()
    team = Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig())
    team.propose(tree, tree.root)  # the reference is selected: its profile is the best's
    planner = client.prompts[0][1]
    assert "## The selected kernel (0: the reference module itself (eager), median 1 ms" in planner
    assert "## Profiling feedback (kernel 0.1, the best kernel so far" in planner
    assert "123.0 us  kp_fused_kernel" in planner
    team.propose(tree, best)
    planner = client.prompts[2][1]
    assert "## Profiling feedback (kernel 0.1, the selected kernel, as measured" in planner
    for _, prompt in client.prompts:
        assert "\n-\n" not in prompt  # no stray line after a heading
        heading = re.search(r"^## The selected kernel .*\n\n(.*)$", prompt, re.M)
        assert heading and heading.group(1).startswith("<data id=")


# --- failures from anywhere in the tree ---------------------------------------------------


def test_failed_rejected_and_timed_out_attempts_stay_in_later_prompts_with_their_reasons():
    tree = Tree.rooted()
    good = add(tree, tree.root, kernel("a"), timed(0.5, 1.0))
    elsewhere = add(tree, tree.root, kernel("b"), timed(0.9, 1.0))
    add(tree, elsewhere, kernel("c"), failed(Status.timeout, "no result after 300 s"))
    deep = add(tree, elsewhere, kernel("d"), failed(Status.rejected, "line 3: imports os\nmore",
                                                    "static_gate"))  # fmt: skip
    add(tree, deep, kernel("e"), failed(Status.build_error, "error: 'vfloat' undeclared"))
    tree.add(elsewhere, "improve", failure="planner: no_plan: the reply had no grounded span")
    client = Client()
    team = Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig())
    team.propose(tree, good)  # none of the failures is a child, sibling or cousin of 0.1
    for role, prompt in client.prompts:
        assert "0.2.1 (improve from 0.2), timeout: no result after 300 s" in prompt, role
        assert "0.2.2 (improve from 0.2), rejected (static_gate): line 3: imports os more" in prompt
        assert "0.2.2.1 (improve from 0.2.2), build_error: error: 'vfloat' undeclared" in prompt
        assert "0.2.3 (improve from 0.2), no candidate: planner: no_plan" in prompt


# --- shared code shown once; prompts that do not grow ---------------------------------------


def test_a_kernel_listed_again_is_referred_to_and_kin_are_diffs_against_code_shown():
    selected = KernelSummary(node_id="0.1", code=kernel("a"), status="ok")
    shown = ShownCode(selected)
    child = shown.show(KernelSummary(node_id="0.1.1", code=kernel("b"), status="ok"))
    assert child.shown == "diff" and child.base == "0.1" and HELPER_LINE not in child.code
    assert "-import torch  # variant a" in child.code and "+import torch  # variant b" in child.code
    assert shown.show(selected).shown == "listed"
    stranger = KernelSummary(node_id="0.2", code=REFERENCE, status="ok")
    assert shown.show(stranger).shown == "code"  # nothing like it shown: whole
    # Only a kernel that was kept is a base: one left out of the window is not pointed at.
    kin = KernelSummary(node_id="0.3", code=REFERENCE + "\n# one more line", status="ok")
    assert shown.show(kin).shown == "code"
    shown.keep(stranger, shown.show(stranger))
    assert (shown.show(kin).shown, shown.show(kin).base) == ("diff", "0.2")


def test_the_helper_library_is_shown_once_and_prompts_do_not_grow_over_five_steps(tmp_path):
    client = run_search(5, tmp_path)
    planners = [prompt for role, prompt in client.prompts if role == "planner"]
    assert len(planners) >= 3
    for _, prompt in client.prompts:
        assert prompt.count(HELPER_LINE) <= 1  # whole in one kernel, the others as diffs
    assert max(len(prompt) for prompt in planners) < 1.15 * len(planners[0])


def test_the_console_line_reads_the_best_kernel_as_the_prompts_do(tmp_path):
    """The step line a user watches and the prompts agree: best 2.00x against the one
    baseline, not 4.00x against the eager timed beside it in its own run."""
    from agents.loop import status_line

    problem = Problem(name="p", source_path=tmp_path / "p.py", device="cpu")
    trajectory = new_trajectory(problem, "m", SearchConfig(), seed=1)
    tree = trajectory.tree
    first = add(tree, tree.root, kernel("a"), timed(0.80, 1.0))
    second = add(tree, first, kernel("b"), timed(0.50, 2.0))
    add(tree, first, kernel("c"), timed(0.60, 0.9))
    assert "best 2.00x" in status_line(trajectory, first, [second])
    assert "cached" not in status_line(trajectory, first, [second])  # no call said any
    second.calls.append(
        LLMCall(role="coder", temperature=0.2, text="x", prompt_tokens=9000, cached_tokens=6400)
    )
    assert "tokens (6400 cached)" in status_line(trajectory, first, [second])


def test_the_runs_noise_floor_is_the_one_the_roles_are_told():
    client = Client()
    strict = REF.model_copy(update={"noise_floor": 0.12})
    tree = Tree.rooted()
    add(tree, tree.root, kernel("a"), timed(0.80, 1.0))
    Team(client, LLMConfig(provider="openai", model="m"), strict, TeamConfig()).propose(
        tree, tree.root
    )
    assert "clears the run's noise floor: at least 12%" in client.prompts[0][1]


def test_a_kernel_is_judged_against_the_best_by_the_noise_of_both():
    """Two kernels a planner compares: a 3% difference with 2% spreads is no difference; a
    kernel 1.6x slower than the best is said to be, beyond the noise."""
    tree = Tree.rooted()
    first = add(tree, tree.root, kernel("a"), timed(0.80, 1.0))
    add(tree, first, kernel("b"), timed(0.50, 1.0))
    add(tree, first, kernel("c"), timed(0.515, 1.0))
    client = Client()
    Team(client, LLMConfig(provider="openai", model="m"), REF, TeamConfig()).propose(tree, first)
    planner = client.prompts[0][1]
    assert "the best kernel 0.1.1 takes 0.97x its time, within the noise of the two" in planner
    assert "the best kernel 0.1.1 takes 0.62x its time, beyond the noise of the two" in planner
