"""``python -m bench prompt-sizes``: the characters of every prompt over a scripted search.

Issue 26 measured planner prompts growing from 56K to 106K characters over five steps with a
real model: every listed kernel carried the offline proposer's helper library. This benchmark
runs the real team and loop on examples/fused_gelu_block.py (cpu) with the offline proposer's
real kernel as the root's first child, a scripted model that does what that model did (keeps
the selected kernel, helper library and all, and changes one line) and an evaluator that
answers from a table (verified, build error, gate rejection, ...; eager timed differently in
every run, as it is). No build, no timing: the prompts are what is measured.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from bench.results_format import BenchmarkRecord, finish, new_record, out_option

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fused_gelu_block.py"
BLOCK = re.compile(
    r'<data id="(\w+)" kind="([^"]*)">\n(`{3,})(\w*)\n(.*?)\n\3\n</data id="\1">', re.S
)
TILE = re.compile(r"constexpr int64_t kTile = \d+;.*")
# (kernel ms, eager ms beside it) for a verified run, else the status and its reason.
OUTCOMES: list[tuple[float, float] | tuple[str, str]] = [
    (0.80, 1.00),
    ("build_error", "error: 'vfloat' was not declared in this scope"),
    (0.62, 1.30),
    ("rejected", "line 3: imports os: only torch, math and load_inline may be imported"),
    (0.70, 0.90),
    ("timeout", "no result after 300 s"),
    (0.55, 1.10),
]


def selected_code(prompt: str) -> str:
    """The code the prompt asks to work on: the first Python block after its heading."""
    heading = re.search(r"^## The (selected kernel|failed candidate) ", prompt, re.M)
    if heading is None:
        raise click.ClickException("a role prompt without the selected kernel's heading")
    for block in BLOCK.finditer(prompt, heading.end()):
        if block.group(4) == "python":
            return block.group(5)
    raise click.ClickException("a role prompt without the selected kernel's code")


class ScriptedModel:
    """Plans a change to the selected kernel's last return line; writes the selected kernel
    (the offline kernel when the reference is selected) with its tile size changed."""

    def __init__(self, offline: str) -> None:
        self.offline = offline
        self.calls: list[dict] = []

    def complete(self, messages, *, temperature=None, max_tokens=None, deadline=None, role=None):
        from agents.llm.client import Reply

        prompt = messages[-1].content
        self.calls.append(
            {"call": len(self.calls) + 1, "role": role, "system_chars": len(messages[0].content),
             "user_chars": len(prompt), "total_chars": sum(len(m.content) for m in messages)}
        )  # fmt: skip
        code = selected_code(prompt)
        if role == "planner":
            line = [line for line in code.splitlines() if "return" in line][-1]
            text = f"Tile it.\n<<<IMPROVE BEGINS>>>\n{line}\n<<<IMPROVE ENDS>>>\nA larger tile.\n"
        else:
            base = code if "class ModelNew" in code else self.offline
            tile = f"constexpr int64_t kTile = {4096 + 512 * len(self.calls)};"
            text = f"Larger tiles.\n```python\n{TILE.sub(tile, base)}\n```\n"
        return Reply(text=text, model="scripted", prompt_tokens=len(prompt) // 4,
                     completion_tokens=len(text) // 4, cost_usd=None, finish_reason="stop",
                     seconds=0.0, attempts=1)  # fmt: skip


class TableEvaluator:
    """Answers each candidate from OUTCOMES, in turn."""

    deadline: float | None = None

    def __init__(self) -> None:
        self.runs = 0

    def prebuild(self, problem, candidates) -> None: ...

    def parallel(self, problem) -> int:
        return 1

    def build(self, problem, candidate) -> None: ...

    def evaluate(self, problem, candidate):
        from harness.judge.accept import accept
        from harness.records import EvalResult, Status, Timings, TimingStats

        outcome = OUTCOMES[self.runs % len(OUTCOMES)]
        self.runs += 1
        if isinstance(outcome[0], str):
            return EvalResult(status=Status(outcome[0]), reason=str(outcome[1]), device="cpu")
        kernel_ms, eager_ms = float(outcome[0]), float(outcome[1])
        stats = lambda ms: TimingStats(median_ms=ms, iqr_ms=ms * 0.03, min_ms=ms * 0.95,  # noqa: E731
                                       samples=40)  # fmt: skip
        timings = Timings(candidate=stats(kernel_ms), eager_beside=stats(eager_ms),
                          compiled_beside=stats(0.7))  # fmt: skip
        result = EvalResult(status=Status.ok, device="cpu", timings=timings,
                            time_breakdown=[("kp_fused", kernel_ms * 800), ("aten::linear", 200.0)])  # fmt: skip
        result.vs_eager = accept(stats(kernel_ms), stats(eager_ms))
        result.vs_compile = accept(stats(kernel_ms), stats(0.7))
        return result


def measure(steps: int, seed: int, folder: Path) -> list[dict]:
    from agents.context import Reference
    from agents.llm.client import LLMConfig
    from agents.loop import new_trajectory, search
    from agents.offline import propose
    from agents.search.config import SearchConfig
    from agents.team import Team, TeamConfig
    from harness.records import Problem

    problem = Problem(name="fused_gelu_block", source_path=EXAMPLE, device="cpu")
    offline = propose(problem).candidate
    if offline is None:
        raise click.ClickException("the offline proposer made no kernel for the example")
    model = ScriptedModel(offline.source)
    reference = Reference(source=EXAMPLE.read_text(), device="cpu")
    team = Team(model, LLMConfig(provider="openai", model="scripted"), reference, TeamConfig())
    config = SearchConfig(strategy="epsilon-greedy", attempts=steps + 1, max_cost_usd=None,
                          max_unpriced_tokens=None)  # fmt: skip
    trajectory = new_trajectory(problem, "scripted", config, seed, offline)
    search(problem, TableEvaluator(), team, trajectory, folder / "trajectory.json", config,
           lambda line: None)  # fmt: skip
    return model.calls


def render(record: BenchmarkRecord) -> str:
    lines = ["call  role      system   user     total"]
    lines += [
        f"{row['call']:>4}  {row['role']:<8} {row['system_chars']:>7,} {row['user_chars']:>7,} "
        f"{row['total_chars']:>8,}"
        for row in record.rows
    ]
    lines.append(f"total characters: {record.context['total_chars']:,}")
    return "\n".join(lines)


@click.command("prompt-sizes")
@click.option("--steps", type=click.IntRange(min=1), default=5, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True, help="The search's seed.")
@out_option
def cli(steps: int, seed: int, out: Path | None) -> None:
    """Characters of every prompt of a scripted search (issue 26: prompts that do not grow)."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kp-prompt-sizes-") as folder:
        rows = measure(steps, seed, Path(folder))
    context = {"steps": steps, "seed": seed, "total_chars": sum(r["total_chars"] for r in rows)}
    finish(new_record("prompt-sizes", "cpu", rows, context), out, render)
