"""The KernelBench sweep's speedups as a PNG (issue 27, goal 6): one bar per problem whose
candidate was ok, its speedup over torch.compile, sorted, on a log scale with 1.0x marked, and
eager's speedup as a dot on the same problem; the title holds the geometric means, both over
those problems (an ok candidate without a torch.compile time is not shown, nor counted).

    python -m bench kb-sweep --table OUT.json --plot speedups.png
"""

from __future__ import annotations

import math
from pathlib import Path

from bench.kb_sweep_rows import SweepRow


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def plotted(rows: list[SweepRow]) -> list[SweepRow]:
    """The rows a plot shows: ok candidates with both speedups, slowest vs compile first."""
    shown = [
        row
        for row in rows
        if row.candidate_status == "ok" and row.speedup_vs_compile and row.speedup_vs_eager
    ]
    return sorted(shown, key=lambda row: row.speedup_vs_compile or 0.0)


def plot_speedups(rows: list[SweepRow], path: Path) -> int:
    """Write the PNG to ``path``; the number of problems shown (0: no file written)."""
    shown = plotted(rows)
    if not shown:
        return 0
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot as plt

    compile_x = [row.speedup_vs_compile or 1.0 for row in shown]
    eager_x = [row.speedup_vs_eager or 1.0 for row in shown]
    figure, axes = plt.subplots(figsize=(max(6.0, 0.28 * len(shown) + 2), 4.2), dpi=100)
    try:
        places = range(len(shown))
        colors = ["tab:green" if value >= 1.0 else "tab:red" for value in compile_x]
        axes.bar(places, compile_x, color=colors, label="vs torch.compile")
        axes.scatter(places, eager_x, color="black", s=12, zorder=3, label="vs eager")
        axes.axhline(1.0, color="grey", linewidth=1)
        axes.set_yscale("log")
        low, high = min([*compile_x, *eager_x, 1.0]), max([*compile_x, *eager_x, 1.0])
        ticks = [2.0**power for power in range(-6, 7) if low / 2 <= 2.0**power <= high * 2]
        axes.set_yticks(ticks, [f"{tick:g}x" for tick in ticks])
        axes.minorticks_off()
        axes.set_xticks(list(places), [row.name.split("/")[-1][:28] for row in shown],
                        rotation=90, fontsize=6)  # fmt: skip
        axes.set_ylabel("speedup (x, log scale)")
        devices = sorted({row.device for row in shown})
        axes.set_title(
            f"{len(shown)} problems on {', '.join(devices)}: geomean "
            f"{geomean(compile_x):.2f}x vs torch.compile, {geomean(eager_x):.2f}x vs eager",
            fontsize=9,
        )
        axes.legend(fontsize=7)
        figure.tight_layout()
        figure.savefig(path)
    finally:
        plt.close(figure)
    return len(shown)
