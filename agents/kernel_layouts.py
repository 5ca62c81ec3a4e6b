"""The memory layouts a profiled call's kernels name: what a plan needs to aim at a layout gap
(issue 27, goal 2). On the 2-d convolutions of KernelBench, torch.compile's lead over eager was
layout alone: both ran the same NHWC convolution, but eager paid cuDNN's conversions of its
input to NHWC and of its output back (bench/BENCHMARKS.md, sections 22 and 25).

Read from the kernels' names only (cuDNN's and CUTLASS's spell their layouts; Triton's and
ATen's elementwise kernels do not), so a line says what the names say, nothing more.
"""

from __future__ import annotations

import re

LAYOUTS = ("nhwc", "nchw", "ndhwc", "ncdhw")
# cuDNN's conversion kernels: nchwToNhwcKernel, nhwcToNchwKernel, ...
CONVERSION = re.compile(r"(n[cdhw]{3,4})to(n[cdhw]{3,4})", re.IGNORECASE)
# Kernels that compute a convolution (or its implicit GEMM): their names carry its layout.
CONVOLUTION = re.compile(r"conv|fprop|dgrad|wgrad|implicit_gemm", re.IGNORECASE)


def layout_line(breakdown: list[tuple[str, float]]) -> str | None:
    """What ``breakdown``'s kernel names say of layouts (a convolution's, the conversions and
    their time), or None where they say nothing."""
    conversions: dict[str, float] = {}
    computed: set[str] = set()
    for name, microseconds in breakdown:
        if match := CONVERSION.search(name):
            change = f"{match.group(1).upper()} to {match.group(2).upper()}"
            conversions[change] = conversions.get(change, 0.0) + microseconds
        elif CONVOLUTION.search(name):
            lowered = name.lower()
            computed.update(
                layout.upper() for layout in LAYOUTS if re.search(rf"(?<![a-z]){layout}", lowered)
            )
    if not conversions and not computed:
        return None
    parts = []
    if computed:
        parts.append(f"the convolution runs {' and '.join(sorted(computed))}")
    if conversions:
        total = sum(conversions.values())
        each = ", ".join(f"{change} {us:.1f} us" for change, us in conversions.items())
        parts.append(f"layout conversions take {total:.1f} us ({each})")
    else:
        parts.append("no layout conversion kernel")
    return f"  Layouts, as the kernels' names say: {'; '.join(parts)}."
