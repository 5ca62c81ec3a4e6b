"""``python -m bench busy``: verdicts on a busy machine. The honest corpus (``tests/honest``),
evaluated ``--rounds`` times on a quiet machine and with one CPU-bound process per core beside
it (``tests.machine_load``), in one run: how many evaluations ended ok, not judged (the machine
too busy every time: ``harness.judge.busy``) or wrongly (a false rejection), each kernel's
speedup over the rounds (its spread), and the preempted calls and other processes' cores seen.

``--record DIR`` also writes each evaluation's timings as a fixture of ``tests/test_busy.py``
(the decision rule on real windows): a quiet one must be judged, a loaded one must never be
rejected.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import click

from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.problem.load import problem_from_target
from harness.records import Candidate, EvalResult
from tests.machine_load import cpu_load
from tests.test_corpus import ENTRIES

NOT_WRONG = ("ok", "unjudged")


def _row(entry, load: str, round_number: int, result: EvalResult, seconds: float) -> dict:
    timings = result.timings
    stats = [s for s in (timings.eager_alone, timings.eager_beside, timings.eager_after,
                         timings.candidate) if s is not None]  # fmt: skip
    return {
        "entry": entry.path.stem,
        "load": load,
        "round": round_number,
        "status": result.status.value,
        "reason": result.reason[:300],
        "vs_eager": result.vs_eager.speedup if result.vs_eager else None,
        "candidate_ms": timings.candidate.median_ms if timings.candidate else None,
        "preempted_share": max((s.preempted_share for s in stats), default=0.0),
        "others_cores": max((w.others_cores for w in timings.windows.values()), default=0.0),
        "seconds": round(seconds, 1),
    }


def measure(device: str, rounds: int, loads: list[str], budget: float, record: Path | None):
    honest = [e for e in ENTRIES if e.pattern == "honest" and e.device == device]
    config = EvalConfig(compile_baseline=False, time_budget_s=budget)
    evaluators = {entry.problem: Evaluator(config) for entry in honest}
    problems = {entry.problem: problem_from_target(str(entry.problem), device, "float32")
                for entry in honest}  # fmt: skip
    candidates = {entry.path: Candidate(source=entry.path.read_text()) for entry in honest}
    # References and builds first, on a quiet machine: they are not what is measured.
    for path, evaluator in evaluators.items():
        evaluator.reference(problems[path])
    with ThreadPoolExecutor(max_workers=len(honest)) as pool:
        list(pool.map(lambda e: evaluators[e.problem].build(problems[e.problem], candidates[e.path]),
                      honest))  # fmt: skip
    rows = []
    for round_number in range(1, rounds + 1):
        for load in loads:
            for entry in honest:
                evaluator, problem = evaluators[entry.problem], problems[entry.problem]
                started = time.perf_counter()
                with cpu_load() if load == "cpu" else nullcontext():
                    result = evaluator.evaluate(problem, candidates[entry.path])
                row = _row(entry, load, round_number, result, time.perf_counter() - started)
                rows.append(row)
                print(f"{load:5} round {round_number} {row['entry']}: {row['status']} "
                      f"vs eager {row['vs_eager'] or 0:.2f}x, preempted "
                      f"{row['preempted_share']:.0%}, others {row['others_cores']:.1f} cores, "
                      f"{row['seconds']:.0f} s", flush=True)  # fmt: skip
                if record is not None:
                    _record(record, entry, load, round_number, result)
    return rows


def _record(folder: Path, entry, load: str, round_number: int, result: EvalResult) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    expected = ["ok"] if load == "none" else list(NOT_WRONG)
    fixture = {
        "recorded": f"python -m bench busy (honest {entry.path.stem}, load {load}, round "
        f"{round_number}): {result.status.value}",
        "expected": expected,
        "timings": json.loads(result.timings.model_dump_json(exclude_computed_fields=True)),
    }
    name = f"{entry.device}-{entry.path.stem}-{load}-{round_number}.json"
    (folder / name).write_text(json.dumps(fixture, indent=1) + "\n")


def table(record: BenchmarkRecord) -> str:
    lines = ["| load | evaluations | ok | not judged | wrong | preempted (median) | others' cores (max) |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for load in dict.fromkeys(row["load"] for row in record.rows):
        rows = [row for row in record.rows if row["load"] == load]
        count = {status: sum(row["status"] == status for row in rows) for status in NOT_WRONG}
        wrong = len(rows) - sum(count.values())
        lines.append(
            f"| {load} | {len(rows)} | {count['ok']} | {count['unjudged']} | {wrong} | "
            f"{statistics.median(row['preempted_share'] for row in rows):.0%} | "
            f"{max(row['others_cores'] for row in rows):.1f} |"
        )
    lines += ["", "| kernel | load | vs eager: min | median | max | spread (max/min) |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for entry in dict.fromkeys(row["entry"] for row in record.rows):
        for load in dict.fromkeys(row["load"] for row in record.rows):
            speedups = [row["vs_eager"] for row in record.rows
                        if row["entry"] == entry and row["load"] == load and row["vs_eager"]]  # fmt: skip
            if speedups:
                low, high = min(speedups), max(speedups)
                lines.append(f"| {entry} | {load} | {low:.2f}x | {statistics.median(speedups):.2f}x"
                             f" | {high:.2f}x | {high / low - 1:.1%} |")  # fmt: skip
    return "\n".join(lines)


@click.command(name="busy")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--rounds", default=3, show_default=True, help="Evaluations of each kernel per load.")
@click.option("--load", "loads", type=click.Choice(["none", "cpu"]), multiple=True,
              default=("none", "cpu"), show_default=True,
              help="none: a quiet machine; cpu: a CPU-bound process per core beside it.")  # fmt: skip
@click.option(
    "--time-budget", default=0.5, show_default=True, help="Timing seconds per implementation."
)
@click.option("--record", type=click.Path(path_type=Path), default=None,
              help="Also write each evaluation's timings as a tests/test_busy.py fixture here.")  # fmt: skip
@out_option
def cli(device: str, rounds: int, loads: tuple[str, ...], time_budget: float,
        record: Path | None, out: Path | None) -> None:  # fmt: skip
    """Verdicts of the honest corpus on a quiet and on a loaded machine, one run."""
    bench = new_record("busy", device)
    bench.context = {"rounds": rounds, "time_budget_s": time_budget, "load": "one "
                     "CPU-bound process per core (tests/machine_load.py)"}  # fmt: skip
    bench.rows = measure(device, rounds, list(loads), time_budget, record)
    finish(bench, out, table)
