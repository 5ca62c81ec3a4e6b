"""A benchmark's history as a PNG: each night's median time with its spread (a kernel's; or, for
a configured target without a kernel, eager's and torch.compile's, a line each), the nights of
one setup (device, driver, torch, CUDA) joined by a line and a new series marked where the
setup changed, and the nights that were not ok (stale, missing, failed) marked at the bottom."""

from __future__ import annotations

import io

from bot.nightly.history import Measure, Record


def plot_png(benchmark: str, records: list[Record]) -> bytes:
    """The PNG bytes of ``records``' series (oldest first)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    from matplotlib import pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 3.6), dpi=100)
    try:
        series: dict[tuple[str, str], list[tuple[int, Measure]]] = {}
        for index, record in enumerate(records):
            if record.status != "ok":
                continue
            for name, measure in record.measures().items():
                if measure.median_ms:
                    series.setdefault((name, record.setup), []).append((index, measure))
        for (name, setup), points in series.items():
            label = setup.replace("|", ", ")
            axes.errorbar([i for i, _ in points], [m.median_ms or 0.0 for _, m in points],
                          yerr=[m.iqr_ms / 2 for _, m in points], marker="o", markersize=3,
                          capsize=2, label=label if name == "kernel" else f"{name}, {label}")  # fmt: skip
        previous = None
        for index, record in enumerate(records):
            if record.status == "ok" and previous is not None and record.setup != previous:
                axes.axvline(index - 0.5, color="grey", linestyle=":", linewidth=1)
            if record.status == "ok":
                previous = record.setup
        bad = [i for i, r in enumerate(records) if r.status != "ok"]
        if bad:
            axes.scatter(
                bad, [0] * len(bad), marker="x", color="red", label="stale, missing or failed"
            )
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
