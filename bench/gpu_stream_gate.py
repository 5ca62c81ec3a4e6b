"""The CUDA corpus's stream-order entries with the stream gate on and off (cuda only).

    python3 -m bench.gpu_stream_gate --rounds 2 --out $OUT/stream_gate.json

Every red-team entry of pattern 11 (kernels whose work is not ordered with the caller's
stream) and every honest entry that uses streams, evaluated ``--rounds`` times with the checks'
worker as shipped (the gate preloaded, harness/workers/stream_hold.py) and with ``eval.stream_gate =
false`` (as before the gate). A defense that matters shows as a cheat rejected with it and passed without it; the
honest entries must be ok both ways. Prints a table (entry, expected, verdicts on, verdicts
off, the gate's own line from the stream-order check) and writes every result as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness import evaluate
from harness.config import EvalConfig
from harness.problem.load import problem_from_target
from harness.records import Candidate

ROOT = Path(__file__).resolve().parent.parent

TESTS = ROOT / "tests"


def entries(select: str) -> list[tuple[Path, Path, str]]:
    """(entry, problem, expected) for the stream entries of the CUDA corpus."""
    found = []
    for folder in ("redteam/cuda", "honest/cuda"):
        for path in sorted((TESTS / folder).glob("*.py")):
            head = dict(line[2:].split(": ", 1) for line in path.read_text().splitlines()[:3])
            streams = head["pattern"].startswith("11 ") or "stream" in path.stem
            streams = streams or "synchronized" in path.stem
            if streams and select in path.stem:
                found.append((path, TESTS / head["problem"], head["expect"]))
    return found


def verdict(result) -> str:
    failed = [check.name for check in result.checks if not check.passed]
    return f"{result.status.value} {failed[0]}" if failed else result.status.value


def gate_line(result) -> str:
    detail = next((c.detail for c in result.checks if c.name == "stream_ordered"), "")
    return detail.split("; ", 1)[1] if "; " in detail else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2, help="evaluations per entry and side")
    parser.add_argument("--select", default="", help="only entries whose name contains this")
    parser.add_argument("--out", type=Path, required=True, help="JSON results")
    args = parser.parse_args()
    configs = {
        side: EvalConfig(
            compile_baseline=False, time_budget_s=0.2, min_reps=5, stream_gate=side == "on"
        )
        for side in ("on", "off")
    }
    evaluators: dict[tuple[str, Path], evaluate.Evaluator] = {}
    rows = []
    for path, problem_path, expected in entries(args.select):
        row = {"entry": str(path.relative_to(TESTS)), "expected": expected, "on": [], "off": []}
        problem = problem_from_target(str(problem_path), "cuda", "float32")
        candidate = Candidate(source=path.read_text())
        for side in ("on", "off"):
            key = (side, problem_path)
            evaluators.setdefault(key, evaluate.Evaluator(configs[side]))
            for _ in range(args.rounds):
                started = time.monotonic()
                result = evaluators[key].evaluate(problem, candidate)
                row[side].append(
                    {
                        "verdict": verdict(result),
                        "reason": result.reason,
                        "gate": gate_line(result),
                        "seconds": round(time.monotonic() - started, 1),
                    }
                )
                print(f"{row['entry']} gate {side}: {row[side][-1]}", flush=True)
        rows.append(row)
        args.out.write_text(json.dumps(rows, indent=1))
    print("\n| entry | expected | gate on | gate off | the gate's line (on) |")
    print("|---|---|---|---|---|")
    for row in rows:
        on = ", ".join(r["verdict"] for r in row["on"])
        off = ", ".join(r["verdict"] for r in row["off"])
        line = row["on"][0]["gate"] if row["on"] else ""
        print(f"| {row['entry']} | {row['expected']} | {on} | {off} | {line} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
