"""Read what `bash bench/gpu_run.sh probe` brought back: for every candidate worker, eager's
median per timing loop (alone, before the candidate is loaded; beside its calls; after them,
where the harness has that loop) and the ratios the disturbance check judges.

    python bench/analyze_probe.py DIR   # DIR holds probe-samples.tgz (or probe-samples/)
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tarfile
import tempfile
from pathlib import Path

LOOPS = ("alone", "beside", "after")


def workers(folder: Path) -> list[dict[str, dict]]:
    """Each worker's loops by name, in the order the workers ran."""
    by_pid: dict[int, dict[str, dict]] = collections.defaultdict(dict)
    for path in folder.glob("*.json"):
        record = json.loads(path.read_text())
        if "loop" in record:  # not a profiler session's start
            by_pid[record["pid"]][record["loop"]] = record
    return sorted(by_pid.values(), key=lambda loops: min(r["began"] for r in loops.values()))


def median_us(record: dict, name: str) -> float:
    return statistics.median(call[2] for call in record["calls"] if call[0] == name) * 1e3


def summary(folder: Path) -> str:
    lines, ratios = [], collections.defaultdict(list)
    for loops in workers(folder):
        eager = {loop: median_us(loops[loop], "eager") for loop in LOOPS if loop in loops}
        if "beside" not in loops or "alone" not in eager:
            continue
        candidate = median_us(loops["beside"], "candidate")
        parts = [f"{loop} {eager[loop]:.0f}" for loop in LOOPS if loop in eager]
        ratios["beside/alone"].append(eager["beside"] / eager["alone"])
        if "after" in eager:
            ratios["after/alone"].append(eager["after"] / eager["alone"])
            ratios["beside/after"].append(eager["beside"] / eager["after"])
        lines.append(f"  eager us: {', '.join(parts)}; candidate {candidate:.0f}")
    for name, values in ratios.items():
        shown = " ".join(f"{v:.2f}" for v in values)
        lines.append(
            f"  {name}: {shown} (median {statistics.median(values):.2f}, max {max(values):.2f})"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    args = parser.parse_args()
    samples = args.folder / "probe-samples"
    with tempfile.TemporaryDirectory() as scratch:
        if not samples.is_dir():
            with tarfile.open(args.folder / "probe-samples.tgz") as archive:
                archive.extractall(scratch, filter="data")
            samples = Path(scratch) / "probe-samples"
        for run in sorted(path for path in samples.iterdir() if path.is_dir()):
            print(run.name)
            print(summary(run))


if __name__ == "__main__":
    main()
