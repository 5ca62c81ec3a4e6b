"""The search as the roles read it (``prompts/view.md``): the setting every kernel is judged in,
the search so far, and each listed kernel's line and code.

The words are the template's; this module picks the section and formats the numbers. Texts
that are not kernelpilot's own (sources, diffs, verdicts and reasons, which quote logs and the
user's errors) go in as data blocks.
"""

from __future__ import annotations

import math

from agents.context import ContextWindow, KernelSummary, Reference, SearchState
from agents.search.view import machine_of
from agents.templates import render_section
from agents.untrusted import data_block
from harness.judge.accept import SHORT_WORK_FLOOR, SHORT_WORK_MS
from harness.judge.tolerance import tolerance_for
from harness.machine import Machine
from harness.records import Verdict

UNKNOWN = "unknown"


def view(section: str, **values: str) -> str:
    return render_section("view", section, values)


def setting_text(reference: Reference) -> str:
    """Machine, tolerance, and how kernels are ranked, compared and judged faster."""
    tolerance = tolerance_for(reference.dtype, reference.atol, reference.rtol)
    floor_rule = view(
        "floor_rule",
        floor=_percent(reference.noise_floor),
        short_floor=_percent(SHORT_WORK_FLOOR),
        short_us=f"{SHORT_WORK_MS * 1000:g}",
    )
    return view(
        "setting",
        machine=machine_text(machine_of(reference)),
        tolerance=view(
            "tolerance",
            dtype=reference.dtype,
            atol=f"{tolerance.atol:g}",
            rtol=f"{tolerance.rtol:g}",
            rel_norm=f"{tolerance.rel_norm:g}",
        ),  # fmt: skip
        floor_rule=floor_rule,
    )


def machine_text(machine: Machine) -> str:
    if machine.device == "cuda":
        return view(
            "machine_cuda", name=machine.name, capability=_known(machine.capability),
            sms=_known(machine.sms), shared_block=_known(machine.shared_per_block_kib),
            shared_optin=_known(machine.shared_per_block_optin_kib),
            shared_sm=_known(machine.shared_per_sm_kib), registers=_known(machine.registers_per_sm),
            threads=_known(machine.threads_per_sm), l2=_known(machine.l2_mib),
            memory=_known(machine.memory_gib),
        )  # fmt: skip
    caches = ", ".join(
        f"{cache.name} {_kib(cache.size_kib)}" + (f" per {cache.shared_by} CPUs"
                                                   if cache.shared_by > 1 else " per CPU")
        for cache in machine.caches
    )  # fmt: skip
    return view(
        "machine_cpu", name=machine.name, cpus=_known(machine.cpus),
        per_core=_known(machine.threads_per_core),
        isa=", ".join(machine.isa) or UNKNOWN, caches=caches or UNKNOWN,
    )  # fmt: skip


def search_text(search: SearchState) -> str:
    """The baseline, the best kernel, the failed attempts (as one data block)."""
    base = search.baseline
    if base.eager_ms is None:
        baseline = view("baseline_none")
    else:
        compiled = f"{_ms(base.compiled_ms)} ms" if base.compiled_ms else "not measured"
        baseline = view(
            "baseline", eager=_ms(base.eager_ms), count=str(base.measurements),
            eager_min=_ms(base.eager_min_ms), compiled=compiled,
        )  # fmt: skip
    best = search.best
    if best is None or best.median_ms is None:
        best_text = view("best_none")
    else:
        speedup = _x(best.speedup_vs_eager)
        best_text = view("best", node_id=best.node_id, median=_ms(best.median_ms), speedup=speedup)
    lines = [
        view("failure", node_id=f.node_id, kind=f.kind, parent=f.parent, stage=f.stage,
             reason=f.reason)
        for f in search.failures
    ]  # fmt: skip
    if search.failures_omitted:
        lines.insert(0, view("failures_more", count=str(search.failures_omitted)))
    failures = (
        data_block("\n".join(lines), "the failed attempts") if lines else view("failures_none")
    )
    return view("search", baseline=baseline, best=best_text, failures=failures)


def summary_text(kernel: KernelSummary) -> str:
    """The kernel's heading: its status, times, speedups against the one baseline, and its
    own run's verdicts."""
    if kernel.status == "reference":
        if kernel.median_ms is None:
            return view("reference_untimed")
        return view("reference", median=_ms(kernel.median_ms), fastest=_ms(kernel.min_ms))
    if kernel.median_ms is None:
        return view("untimed", status=kernel.status)
    compile_part = (
        view("compile_speedup", speedup=_x(kernel.speedup_vs_compile))
        if kernel.speedup_vs_compile is not None
        else ""
    )
    verdicts = [_verdict(verdict, name) for verdict, name in
                ((kernel.vs_eager, "eager"), (kernel.vs_compile, "torch.compile")) if verdict]  # fmt: skip
    if kernel.vs_best is not None:
        verdicts.append(_against_best(kernel.vs_best, kernel.best_id))
    return view(
        "timed", status=kernel.status, median=_ms(kernel.median_ms),
        fastest=_ms(kernel.min_ms), speedup=_x(kernel.speedup_vs_eager), compile=compile_part,
        verdicts="; ".join(verdicts) or UNKNOWN,
    )  # fmt: skip


def detail_text(kernel: KernelSummary) -> str:
    """Why it failed, as a data block and a blank line; nothing for a kernel without one."""
    if not kernel.detail.strip():
        return ""
    return data_block(kernel.detail, f"the verdict on kernel {kernel.node_id}") + "\n\n"


def code_text(kernel: KernelSummary) -> str:
    """Its code as the window shows it: whole, a diff, the same as another, or shown above."""
    if kernel.shown == "listed":
        return view("listed")
    if kernel.shown == "diff" and not kernel.code.strip():
        return view("same_code", base=kernel.base)
    if kernel.shown == "diff":
        label = f"kernel {kernel.node_id} as a diff against kernel {kernel.base}"
        return view("diff", base=kernel.base) + "\n\n" + data_block(kernel.code, label, "diff")
    return data_block(kernel.code, f"the source of kernel {kernel.node_id}", "python")


def profile_label(window: ContextWindow) -> str:
    if not window.profile.strip():
        return view("profile_none")
    if window.profile_of and window.profile_of != window.selected.node_id:
        return view("profile_best", node_id=window.profile_of)
    return view("profile_selected", node_id=window.profile_of or window.selected.node_id)


def _verdict(verdict: Verdict, baseline: str) -> str:
    section = "faster" if verdict.faster else "slower" if verdict.slower else "within"
    return view(section, baseline=baseline, floor=_percent(verdict.noise_floor))


def _against_best(verdict: Verdict, best_id: str) -> str:
    """This kernel's median against the best kernel's (never below it: the best is the
    lowest median), judged by both runs' spreads."""
    section = "best_slower" if verdict.slower else "best_within"
    return view(section, best=best_id, ratio=_x(verdict.speedup),
                floor=_percent(verdict.noise_floor))  # fmt: skip


def _percent(fraction: float) -> str:
    return "unbounded (too few timed calls)" if math.isinf(fraction) else f"{fraction:.0%}"


def _ms(value: float | None) -> str:
    return UNKNOWN if value is None else f"{value:.4g}"


def _x(speedup: float | None) -> str:
    return "n/a" if speedup is None else f"{speedup:.2f}x"


def _kib(size: int) -> str:
    return f"{size // 1024} MiB" if size >= 1024 and size % 1024 == 0 else f"{size} KiB"


def _known(value: object) -> str:
    return UNKNOWN if value is None else str(value)
