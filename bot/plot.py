"""A benchmark's history as a PNG: each night's median time with its spread, the nights of one
setup (device, driver, torch, CUDA) joined by a line and a new series marked where the setup
changed, and the nights that were not ok (stale, failed) marked at the bottom."""

from __future__ import annotations

import io

from bot.history import Record


def plot_png(benchmark: str, records: list[Record]) -> bytes:
    """The PNG bytes of ``records``' series (oldest first)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3.6), dpi=100)
    try:
        timed = [(i, r) for i, r in enumerate(records) if r.status == "ok" and r.time_ms]
        series: dict[str, list[tuple[int, Record]]] = {}
        for index, record in timed:
            series.setdefault(record.setup, []).append((index, record))
        for setup, points in series.items():
            xs = [i for i, _ in points]
            ys = [r.time_ms or 0.0 for _, r in points]
            spreads = [r.iqr_ms / 2 for _, r in points]
            axes.errorbar(xs, ys, yerr=spreads, marker="o", markersize=3, capsize=2,
                          label=setup.replace("|", ", "))  # fmt: skip
        previous = None
        for index, record in enumerate(records):
            if record.status == "ok" and previous is not None and record.setup != previous:
                axes.axvline(index - 0.5, color="grey", linestyle=":", linewidth=1)
            if record.status == "ok":
                previous = record.setup
        bad = [i for i, r in enumerate(records) if r.status != "ok"]
        if bad:
            axes.scatter(bad, [0] * len(bad), marker="x", color="red", label="stale or failed")
        axes.set_title(benchmark, fontsize=10)
        axes.set_ylabel("median time (ms)")
        axes.set_ylim(bottom=0)
        ticks = list(range(len(records)))
        step = max(1, len(ticks) // 10)
        axes.set_xticks(ticks[::step], [records[i].night for i in ticks[::step]],
                        rotation=30, fontsize=7)  # fmt: skip
        axes.legend(fontsize=7, loc="best")
        figure.tight_layout()
        out = io.BytesIO()
        figure.savefig(out, format="png")
        return out.getvalue()
    finally:
        plt.close(figure)
