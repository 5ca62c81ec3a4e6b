"""Why an honest kernel is sometimes rejected as disturbing the baseline: evaluate corpus
entries again and again, each in a fresh evaluator, and record both eager measurements (alone,
before the candidate is loaded; beside it), their ratio, the verdict, and the GPU's clocks,
temperature and power just before each evaluation.

    python bench/probe_disturbance.py [ENTRY.py ...] [--rounds N] [--out FILE]

ENTRY: a corpus file (tests/honest/cuda/... by default the two that were rejected in session
11); its "# problem:" header names the problem. Rounds alternate the entries, so a state of
the machine that lasts minutes shows in both.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config import EvalConfig  # noqa: E402
from harness.evaluate import Evaluator  # noqa: E402
from harness.problem import problem_from_target  # noqa: E402
from harness.records import Candidate  # noqa: E402

DEFAULT = [
    "tests/honest/cuda/layernorm_residual_smem.py",
    "tests/honest/cuda/bias_gelu_float4_tails.py",
]
QUERY = "clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active"


def gpu_state() -> str:
    done = subprocess.run(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return done.stdout.strip() or done.stderr.strip()


def problem_of(entry: Path) -> Path:
    match = re.search(r"^# problem: (.+)$", entry.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{entry}: no '# problem:' header")
    return ROOT / "tests" / match.group(1).strip()


def evaluate(entry: Path, seed: int) -> dict:
    problem = problem_from_target(str(problem_of(entry)), "cuda", "float32")
    before = gpu_state()
    evaluator = Evaluator(EvalConfig(), seed=seed)
    try:
        result = evaluator.evaluate(problem, Candidate(source=entry.read_text(), origin="user"))
    finally:
        evaluator.close()
    row = {"entry": entry.name, "seed": seed, "gpu_before": before, "gpu_after": gpu_state()}
    row["status"], row["reason"] = result.status.value, result.reason[:300]
    for name in ("eager_alone", "eager", "compiled", "candidate"):
        stats = getattr(result, name)
        row[name] = (
            None if stats is None else {"median_ms": stats.median_ms, "min_ms": stats.min_ms}
        )
    if result.eager and result.eager_alone:
        row["ratio"] = result.eager.median_ms / result.eager_alone.median_ms
        row["fastest_ratio"] = result.eager.min_ms / result.eager_alone.min_ms
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("entries", nargs="*", default=DEFAULT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    for round_number in range(args.rounds):
        for entry in args.entries:
            row = evaluate(ROOT / entry, seed=round_number + 1)
            rows.append(row)
            print(
                f"{row['entry']:<40} {row['status']:<9} alone {row['eager_alone']} beside "
                f"{row['eager']} ratio {row.get('ratio', float('nan')):.2f} | {row['gpu_before']}",
                flush=True,
            )
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
