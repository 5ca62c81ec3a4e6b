"""Profiling feedback for the planner: what the harness measured about the selected node.

Times against eager and torch.compile, the share of the device's ceilings the kernel reaches
(its bytes against a copy of as many bytes, its matmul/conv work against a large matmul, both
timed by the kernel's timer), where one call of the kernel, of eager and of torch.compile each
spends its time (kernels on cuda, operators on cpu, with the memory layouts their names say)
and the baselines' rates on the same bytes, and the verdicts. A share over 100% is not a kernel beating the
device but a ceiling measured too low (or bytes counted too high): it is named as that and not
shown, since every plan built on a false figure is misled by it.
"""

from __future__ import annotations

from agents.kernel_layouts import layout_line
from agents.search.tree import Node, Tree
from harness.records import EvalResult, TimingStats

# What the planner reads where a kernel did better than its measured ceiling.
CEILING_BELOW_ACHIEVED = "ceiling measurement below achieved; not shown"


def node_feedback(tree: Tree, node: Node) -> str:
    result = node.result
    if node.kind == "root":
        best = tree.best()
        if best is None or best.result is None:
            return "The reference has not been timed yet: no candidate has been verified."
        result = best.result
        lines = [f"Eager (the reference) runs in {_ms(tree.root_ms)} per call."]
    elif result is None:
        return f"No candidate: {node.failure}"
    else:
        lines = [f"Verdict: {result.status.value}. {result.reason}".strip()]
    timings = result.timings
    kernel, eager, compiled = timings.candidate, timings.eager_beside, timings.compiled_beside
    if kernel and eager:
        lines.append(
            f"Kernel {_ms(kernel.median_ms)} (IQR {_ms(kernel.iqr_ms)}), "
            f"eager {_ms(eager.median_ms)}, "
            f"torch.compile {_ms(compiled.median_ms) if compiled else 'not measured'}."
        )
        if result.speedup_vs_eager is not None:
            lines.append(f"Speedup vs eager {result.speedup_vs_eager:.2f}x"
                         + (f", vs torch.compile {result.speedup_vs_compile:.2f}x"
                            if result.speedup_vs_compile is not None else "") + ".")  # fmt: skip
        lines += ceiling_lines(result, kernel.median_ms)
    unit = "device time per kernel" if result.device == "cuda" else "CPU time per operator"
    if result.time_breakdown:
        lines.append(f"One profiled call ({unit}):")
        lines += _breakdown(result.time_breakdown)
    for name, breakdown in result.baseline_breakdowns.items():
        if breakdown:
            lines.append(f"One profiled call of {name}, what the kernel is up against ({unit}):")
            lines += _breakdown(breakdown)
    if result.device_us:
        summed = ", ".join(f"{name} {us:.1f} us" for name, us in result.device_us.items())
        lines.append(f"Device time of those calls, kernels summed: {summed}.")
    if kernel and eager:
        lines += baseline_rates(result, {"eager": eager, "torch.compile": compiled})
    failed = [f"{check.name}: {check.detail}" for check in result.checks if not check.passed]
    if failed:
        lines.append("Failed checks: " + "; ".join(failed))
    return "\n".join(lines)


def _breakdown(rows: list[tuple[str, float]]) -> list[str]:
    """Each kernel's time, then what their names say of layouts (``agents.kernel_layouts``)."""
    lines = [f"  {microseconds:10.1f} us  {name}" for name, microseconds in rows]
    layouts = layout_line(rows)
    return lines + ([layouts] if layouts else [])


def baseline_rates(result: EvalResult, baselines: dict[str, TimingStats | None]) -> list[str]:
    """The baselines' rates on the same bytes as the kernel's (its roofline's other points)."""
    if not (result.io_bytes and result.copy_bandwidth_gbs):
        return []
    rates = [
        f"{name} {_gbs(result.io_bytes, stats.median_ms):.0f} GB/s"
        for name, stats in baselines.items()
        if stats is not None and stats.median_ms > 0
    ]
    return [f"On the same bytes: {', '.join(rates)}."] if rates else []


def _gbs(io_bytes: int, ms: float) -> float:
    """GB/s of ``io_bytes`` moved in ``ms``."""
    return io_bytes / (ms / 1e3) / 1e9


def _ms(value: float) -> str:
    return f"{value:.4f} ms"


def ceiling_lines(result: EvalResult, kernel_ms: float) -> list[str]:
    """The kernel's rates against the device's measured ceilings; a share only where it is at
    most 100%, else the flag."""
    if kernel_ms <= 0:
        return []
    lines = []
    if result.io_bytes and result.copy_bandwidth_gbs:
        achieved = _gbs(result.io_bytes, kernel_ms)
        ceiling = result.copy_bandwidth_gbs
        lines.append(
            f"It moves at least {result.io_bytes / 1e6:.1f} MB per call (its inputs read and its "
            f"outputs written, once each): {achieved:.0f} GB/s, "
            + _share(
                achieved,
                ceiling,
                "copy bandwidth",
                f"{ceiling:.0f} GB/s: the fastest copy of as many bytes, on the kernel's timer",
            )
        )
    if result.flops and result.matmul_tflops:
        rate = result.flops / (kernel_ms / 1e3) / 1e12
        ceiling = result.matmul_tflops
        lines.append(
            f"The reference's matmul/conv work is {result.flops / 1e9:.2f} GFLOP per call: "
            f"{rate:.1f} TFLOP/s, "
            + _share(
                rate,
                ceiling,
                "matmul rate",
                f"{ceiling:.1f} TFLOP/s: the fastest large square product, on the kernel's timer",
            )
        )
    return lines


def _share(achieved: float, ceiling: float, what: str, measured: str) -> str:
    """``achieved`` as a share of ``ceiling``; above it, the flag, and no figure of the ceiling
    (``measured`` says what it is and how it was measured)."""
    if achieved > ceiling:
        return f"against this device's measured {what}: {CEILING_BELOW_ACHIEVED}."
    return f"{100 * achieved / ceiling:.0f}% of this device's measured {what} ({measured})."
