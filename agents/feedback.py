"""Profiling feedback for the planner: what the harness measured about the selected node.

Times against eager and torch.compile, the share of the device's measured copy bandwidth the
kernel reaches (bytes it must move at least: its inputs and outputs), and the verdicts.
"""

from __future__ import annotations

from agents.search.tree import Node, Tree


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
        if result.io_bytes and result.copy_bandwidth_gbs:
            achieved = result.io_bytes / (kernel.median_ms / 1e3) / 1e9
            lines.append(
                f"It moves at least {result.io_bytes / 1e6:.1f} MB per call: {achieved:.0f} GB/s, "
                f"{100 * achieved / result.copy_bandwidth_gbs:.0f}% of this device's measured "
                f"copy bandwidth ({result.copy_bandwidth_gbs:.0f} GB/s)."
            )
        if result.flops and result.matmul_tflops:
            rate = result.flops / (kernel.median_ms / 1e3) / 1e12
            lines.append(
                f"The reference's matmul/conv work is {result.flops / 1e9:.2f} GFLOP per call: "
                f"{rate:.1f} TFLOP/s, {100 * rate / result.matmul_tflops:.0f}% of this device's "
                f"measured matmul rate ({result.matmul_tflops:.1f} TFLOP/s)."
            )
    if result.time_breakdown:
        unit = "device time per kernel" if result.device == "cuda" else "CPU time per operator"
        lines.append(f"One profiled call ({unit}):")
        lines += [
            f"  {microseconds:10.1f} us  {name}" for name, microseconds in result.time_breakdown
        ]
    failed = [f"{check.name}: {check.detail}" for check in result.checks if not check.passed]
    if failed:
        lines.append("Failed checks: " + "; ".join(failed))
    return "\n".join(lines)


def _ms(value: float) -> str:
    return f"{value:.4f} ms"
