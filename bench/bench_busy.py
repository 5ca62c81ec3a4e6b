"""``python -m bench busy``: verdicts on a busy machine. The honest corpus (``tests/honest``),
evaluated ``--rounds`` times on a quiet machine and with one CPU-bound process per core beside
it (``tests.machine_load``), in one run: how many evaluations ended ok, not judged (the machine
too busy every time: ``harness.judge.busy``) or wrongly (a false rejection), each kernel's
speedup over the rounds (its spread), and the preempted calls and other processes' cores seen.

``--rows FILE`` keeps every evaluation's row as it is measured (a JSON line each) and resumes
from it: a run that stopped (``--stop-after``, a time limit) is carried on by the same command,
the evaluations already there not run again. ``--record DIR`` also writes each evaluation's
timings as a fixture of ``tests/test_busy.py`` (the decision rule on real windows): a quiet one
must be judged, a loaded one must never be rejected.
"""

from __future__ import annotations

import functools
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


def _row(
    entry, load: str, round_number: int, result: EvalResult, seconds: float, timings_run: int
) -> dict:
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
        # cuda: one profiled call's kernels summed, by who ran it (beside call time above)
        "device_us": dict(result.device_us),
        "preempted_share": max((s.preempted_share for s in stats), default=0.0),
        "others_cores": max((w.others_cores for w in timings.windows.values()), default=0.0),
        "seconds": round(seconds, 1),
        "timing_workers": timings_run,
        "phases": {name: round(s, 2) for name, s in result.phase_seconds.items()},
    }


def _count_retries(timings_run: list[int], text: str) -> None:
    if "timing again" in text:
        timings_run.append(1)


def _key(row: dict) -> tuple[str, str, int]:
    return row["entry"], row["load"], row["round"]


def measure(
    device: str,
    rounds: int,
    loads: list[str],
    budget: float,
    record: Path | None,
    kept: Path | None = None,
    stop_after: float | None = None,
    only: tuple[str, ...] = (),
) -> list[dict]:
    honest = [e for e in ENTRIES if e.pattern == "honest" and e.device == device
              and (not only or e.path.stem in only)]  # fmt: skip
    if unknown := set(only) - {entry.path.stem for entry in honest}:
        raise click.BadParameter(
            f"no honest {device} kernel named {', '.join(sorted(unknown))} "
            f"(tests/honest/{device}/: the file names without .py)",
            param_hint="--only",
        )
    rows = (
        [json.loads(line) for line in kept.read_text().splitlines()]
        if kept and kept.exists()
        else []
    )
    done = {_key(row) for row in rows}
    wanted = [(r, load, e) for r in range(1, rounds + 1) for load in loads for e in honest
              if (e.path.stem, load, r) not in done]  # fmt: skip
    if not wanted:
        return rows
    started_run = time.perf_counter()
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
    for number, (round_number, load, entry) in enumerate(wanted):
        if stop_after is not None and time.perf_counter() - started_run > stop_after:
            print(f"stopped after {stop_after:.0f} s: {len(wanted) - number} "
                  "evaluations left for a run with the same --rows", flush=True)  # fmt: skip
            break
        evaluator, problem = evaluators[entry.problem], problems[entry.problem]
        timings_run = [1]  # one, and one more for each "timing again" the evaluator says
        evaluator.progress = functools.partial(_count_retries, timings_run)
        started = time.perf_counter()
        with cpu_load() if load == "cpu" else nullcontext():
            result = evaluator.evaluate(problem, candidates[entry.path])
        seconds = time.perf_counter() - started
        row = _row(entry, load, round_number, result, seconds, len(timings_run))
        rows.append(row)
        if kept is not None:
            with kept.open("a") as out:
                out.write(json.dumps(row) + "\n")
        print(f"{load:5} round {round_number} {row['entry']}: {row['status']} "
              f"vs eager {row['vs_eager'] or 0:.2f}x, preempted "
              f"{row['preempted_share']:.0%}, others {row['others_cores']:.1f} cores, "
              f"{row['seconds']:.0f} s ({len(timings_run)} timing workers)"
              + "".join(f", {who} {us:.1f} µs device" for who, us in row["device_us"].items()),
              flush=True)  # fmt: skip
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
    lines += ["", "| kernel | load | vs eager: min | median | max | spread (max/min) | "
              "device time, kernelpilot µs: min-max (spread) | eager µs |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for entry in dict.fromkeys(row["entry"] for row in record.rows):
        for load in dict.fromkeys(row["load"] for row in record.rows):
            speedups = [row["vs_eager"] for row in record.rows
                        if row["entry"] == entry and row["load"] == load and row["vs_eager"]]  # fmt: skip
            if speedups:
                low, high = min(speedups), max(speedups)
                lines.append(f"| {entry} | {load} | {low:.2f}x | {statistics.median(speedups):.2f}x"
                             f" | {high:.2f}x | {high / low - 1:.1%} | "
                             f"{_device_spread(record.rows, entry, load)} |")  # fmt: skip
    return "\n".join(lines)


def _device_spread(rows: list[dict], entry: str, load: str) -> str:
    """The device time of one profiled call per evaluation, kernelpilot's and eager's ranges."""
    times = [row.get("device_us", {}) for row in rows
             if row["entry"] == entry and row["load"] == load]  # fmt: skip
    ours = [t["kernelpilot"] for t in times if "kernelpilot" in t]
    eager = [t["eager"] for t in times if "eager" in t]
    if not ours or not eager:
        return "- | -"
    return (f"{min(ours):.1f}-{max(ours):.1f} ({max(ours) / min(ours) - 1:.1%}) | "
            f"{min(eager):.1f}-{max(eager):.1f}")  # fmt: skip


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
@click.option("--rows", "kept", type=click.Path(path_type=Path), default=None,
              help="Keep each evaluation's row here as it is measured, and resume from it.")  # fmt: skip
@click.option("--stop-after", type=float, default=None,
              help="Start no evaluation after this many seconds (the rest: a later run, same --rows).")  # fmt: skip
@click.option("--only", multiple=True, metavar="NAME",
              help="Only this honest kernel (a file name of tests/honest/DEVICE without .py); repeatable.")  # fmt: skip
@out_option
def cli(device: str, rounds: int, loads: tuple[str, ...], time_budget: float,
        record: Path | None, kept: Path | None, stop_after: float | None,
        only: tuple[str, ...], out: Path | None) -> None:  # fmt: skip
    """Verdicts of the honest corpus on a quiet and on a loaded machine, one run."""
    bench = new_record("busy", device)
    bench.context = {"rounds": rounds, "time_budget_s": time_budget, "load": "one "
                     "CPU-bound process per core (tests/machine_load.py)"}  # fmt: skip
    bench.rows = measure(device, rounds, list(loads), time_budget, record, kept, stop_after,
                         only)  # fmt: skip
    finish(bench, out, table)
