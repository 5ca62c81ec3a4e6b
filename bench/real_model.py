"""``python -m bench real-model OUT...``: what a real-model check measured, read from the
trajectories its searches saved (``kernelpilot optimize ... --out OUT`` writes
``trajectory-<problem>.json`` there), one row per problem of the fixed set.

The check (bench/BENCHMARKS.md, "Real-model check"): the agent team searches each of PROBLEMS
with a model behind an OpenAI-compatible endpoint (a hosted one, or ``python -m bench
file-endpoint`` where a person or a second model answers through files). Measured per problem:
the attempts the model made (its planner/coder or debugger steps: the offline proposer's seed,
if any, is shown apart), the attempt that gave the first verified kernel and the first one
faster than eager beyond the noise, gate rejections per attempt, the other failures, and the
final speedups of the search's best kernel. A problem of the set with no trajectory is listed
as not run, never dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from agents.search.tree import Node
from agents.trajectory import Trajectory
from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.records import Status

# The fixed set, small enough for a CPU: pointwise chains, and three where the offline proposer
# offers nothing (a norm and a matmul each with one pointwise op alone, a softmax).
PROBLEMS = (
    "examples/fused_gelu_block.py",
    "examples/swiglu.py",
    "tests/redteam/problems/layernorm_residual.py",
    "tests/redteam/problems/row_softmax.py",
    "tests/redteam/problems/linear_relu.py",
)
MODEL_KINDS = ("improve", "debug")  # the model's attempts; "offline" is the proposer's seed


def summarize(trajectory: Trajectory) -> dict[str, Any]:
    """One problem's row: the model's attempts in the order they were made."""
    nodes = list(trajectory.tree.nodes.values())
    attempts = [node for node in nodes if node.kind in MODEL_KINDS]
    statuses = [status_of(node) for node in attempts]
    verified = [n for n, node in enumerate(attempts, 1) if node.ok]
    faster = [n for n, node in enumerate(attempts, 1) if node.ok and faster_than_eager(node)]
    rejected = statuses.count(Status.rejected.value)
    best = trajectory.tree.best()
    offline = next((node for node in nodes if node.kind == "offline"), None)
    calls = [call for node in attempts for call in node.calls]
    return {
        "problem": trajectory.target,
        "model": trajectory.llm,
        "device": trajectory.problem.device,
        "attempts": len(attempts),
        "first_verified": verified[0] if verified else None,
        "first_faster": faster[0] if faster else None,
        "gate_rejections": rejected,
        "rejections_per_attempt": rejected / len(attempts) if attempts else None,
        "failures": {s: statuses.count(s) for s in sorted(set(statuses)) if s != Status.ok.value},
        "best_vs_eager": speedup(best, "eager"),
        "best_vs_compile": speedup(best, "compile"),
        "best_by": best.kind if best else None,
        "offline_seed_vs_eager": speedup(offline, "eager"),
        "llm_calls": len(calls),
        "prompt_tokens": sum(call.prompt_tokens for call in calls),
        "completion_tokens": sum(call.completion_tokens for call in calls),
        "stopped": trajectory.stopped,
    }


def status_of(node: Node) -> str:
    """A status value, or 'no_candidate' where the roles produced none (node.failure)."""
    return node.result.status.value if node.result else "no_candidate"


def faster_than_eager(node: Node) -> bool:
    return bool(node.result and node.result.vs_eager and node.result.vs_eager.faster)


def speedup(node: Node | None, baseline: str) -> float | None:
    if node is None or not node.ok or node.result is None:
        return None
    if baseline == "eager":
        return node.result.speedup_vs_eager
    return node.result.speedup_vs_compile


def trajectories(paths: tuple[Path, ...]) -> list[Trajectory]:
    """The trajectories in ``paths`` (folders: their trajectory-*.json; files as given)."""
    files: list[Path] = []
    for path in paths:
        files += sorted(path.glob("trajectory-*.json")) if path.is_dir() else [path]
    return [Trajectory.load(file) for file in files]


def rows_for(found: list[Trajectory]) -> list[dict[str, Any]]:
    """A row per trajectory, then one per problem of the fixed set that none is of."""
    rows = [summarize(trajectory) for trajectory in found]
    # By the path's tail: a trajectory from another checkout (the GPU machine's) counts too.
    ran = [Path(t.problem.source_path).as_posix() for t in found]
    missing = [path for path in PROBLEMS if not any(r.endswith(f"/{path}") for r in ran)]
    return rows + [{"problem": Path(path).stem, "not_run": path} for path in missing]


def table(record: BenchmarkRecord) -> str:
    lines = [
        "| problem | model | attempts | first verified | first faster | gate rejections "
        "(per attempt) | other failures | best vs eager | best vs torch.compile | offline seed "
        "| LLM calls | tokens in / out |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record.rows:
        if "not_run" in row:
            lines.append(f"| {row['problem']} | not run ({row['not_run']}) |" + " |" * 10)
            continue
        failures = ", ".join(f"{k} {v}" for k, v in row["failures"].items() if k != "rejected")
        per = row["rejections_per_attempt"]
        lines.append(
            f"| {row['problem']} | {row['model']} | {row['attempts']} "
            f"| {_at(row['first_verified'])} | {_at(row['first_faster'])} "
            f"| {row['gate_rejections']} ({'-' if per is None else f'{per:.2f}'}) "
            f"| {failures or 'none'} | {_x(row['best_vs_eager'])} ({row['best_by'] or '-'}) "
            f"| {_x(row['best_vs_compile'])} | {_x(row['offline_seed_vs_eager'])} "
            f"| {row['llm_calls']} | {row['prompt_tokens']} / {row['completion_tokens']} |"
        )
    return "\n".join(lines)


def _at(attempt: int | None) -> str:
    return "never" if attempt is None else f"attempt {attempt}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


@click.command()
@click.argument("paths", nargs=-1, required=True,
                type=click.Path(exists=True, path_type=Path))  # fmt: skip
@out_option
def cli(paths: tuple[Path, ...], out: Path | None) -> None:
    """Attempts to the first verified kernel, gate rejections per attempt and final speedups,
    from the trajectories in PATHS (optimize --out folders, or trajectory-*.json files)."""
    found = trajectories(paths)
    device = found[0].problem.device if found else "cpu"
    record = new_record("real-model", device, rows=rows_for(found),
                        context={"problems": list(PROBLEMS)})  # fmt: skip
    finish(record, out, table)
