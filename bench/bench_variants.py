"""``python -m bench variants``: the offline proposer's CUDA candidate for each problem with one
of its ``kp::`` constants set to each of several values, every variant built, checked against
the reference and its fused kernels timed in device time, in one run.

    python -m bench variants PROBLEM.py... --set kUnroll=1,2,4 [--calls N] [--out FILE]

A problem file defines ``Model``, ``get_inputs()`` and ``get_init_inputs()`` (KernelBench's
form), at its own sizes, float32. Device time: the fused kernels' summed time per call over
``--calls`` profiled calls after a warm-up (the profiler's CUDA activity; no launch overhead,
no other kernel). Builds go through the harness's own loader and cache (precompiled headers
included), outside any sandbox: for the proposer's own kernels only.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import click
import torch
from torch.utils import cpp_extension

from agents.offline import propose_here
from bench.kb_files import problem_name
from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.builds.cache import CachedLoader, default_cache_dir
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import problem_from_target
from harness.problem.user_code import init_arguments


def _variant(source: str, name: str, value: str) -> str:
    pattern = re.compile(rf"constexpr int {re.escape(name)} = [^;]+;")
    if not pattern.search(source):
        raise click.ClickException(f"the candidate has no `constexpr int {name}`")
    return pattern.sub(f"constexpr int {name} = {value};", source)


def _imported(path: Path, loader: CachedLoader):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    original = cpp_extension.load_inline
    cpp_extension.load_inline = loader  # type: ignore[assignment]
    try:
        spec.loader.exec_module(module)  # the proposer's own source
    finally:
        cpp_extension.load_inline = original
    return module


def _fused_us(fn, inputs: list, calls: int) -> tuple[float, float, dict[str, float]]:
    """The fused kernels' device time per call (µs), every kernel's, and each kernel's by
    name, from ``calls`` profiled calls."""
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    activity = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activity) as prof:
        for _ in range(calls):
            fn(*inputs)
        torch.cuda.synchronize()
    total = sum(
        event.device_time_total
        for event in prof.key_averages()
        if "fused_" in event.key and event.device_time_total > 0
    )
    kernels = {
        event.key[:80]: event.self_device_time_total / calls
        for event in prof.key_averages()
        if event.device_type == torch.autograd.DeviceType.CUDA and event.self_device_time_total > 0
    }
    return total / calls, sum(kernels.values()), kernels


def measure(path: Path, name: str, values: list[str], calls: int, scratch: Path) -> list[dict]:
    problem = problem_from_target(f"{path}:Model", "cuda", "float32")
    proposal = propose_here(problem)
    if proposal.candidate is None:
        raise click.ClickException(f"{path}: no candidate ({proposal.reason})")
    reference = build_reference(problem, seed=0)
    inputs = make_inputs(problem, seed=0)
    args, kwargs = init_arguments(problem)
    loader = CachedLoader(default_cache_dir(), "cuda", "float32")
    rows = []
    with torch.no_grad():
        expected = reference(*inputs)
        for value in values:
            file = scratch / f"{path.stem}_{name}_{value}.py"
            file.write_text(_variant(proposal.candidate.source, name, value))
            candidate = _imported(file, loader).ModelNew(*args, **kwargs).cuda().eval()
            candidate.load_state_dict(reference.state_dict(), strict=True)
            torch.testing.assert_close(candidate(*inputs), expected, rtol=1e-4, atol=1e-5)
            microseconds, every, kernels = _fused_us(candidate, inputs, calls)
            rows.append({"problem": problem_name(path), name: value, "fused_us": microseconds,
                         "kernels_us": every, "kernels": kernels})  # fmt: skip
            print(f"{problem_name(path)} {name}={value}: fused kernels {microseconds:.1f} us, "
                  f"every kernel {every:.1f} us: {kernels}", flush=True)  # fmt: skip
    return rows


def table(record: BenchmarkRecord) -> str:
    name = next(key for key in record.rows[0] if key not in ("problem", "fused_us"))
    lines = [
        f"| problem | {name} | fused kernels (µs, device) | vs the first | every kernel (µs) |",
        "|---|---|---|---|---|",
    ]
    first: dict[str, float] = {}
    for row in record.rows:
        base = first.setdefault(row["problem"], row["fused_us"])
        lines.append(
            f"| {row['problem']} | {row[name]} | {row['fused_us']:.1f} | "
            f"{base / row['fused_us']:.2f}x | {row.get('kernels_us', 0.0):.1f} |"
        )
    return "\n".join(lines)


@click.command(name="variants")
@click.argument("problems", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--set",
    "setting",
    required=True,
    help="NAME=V1,V2,...: a `constexpr int` of the candidate's sources and the values to try.",
)
@click.option("--calls", default=5, show_default=True, help="Profiled calls per variant.")
@out_option
def cli(problems: tuple[Path, ...], setting: str, calls: int, out: Path | None) -> None:
    """The offline proposer's CUDA kernels with one constant changed, timed per variant."""
    if not torch.cuda.is_available():
        raise click.UsageError("variants times CUDA kernels: it needs a GPU")
    name, _, listed = setting.partition("=")
    values = [value.strip() for value in listed.split(",") if value.strip()]
    if not name or not values:
        raise click.BadParameter("expected NAME=V1,V2,...", param_hint="--set")
    record = new_record("variants", "cuda")
    scratch = Path(default_cache_dir()).parent / "variants"
    scratch.mkdir(parents=True, exist_ok=True)
    for path in problems:
        record.rows += measure(path, name, values, calls, scratch)
    finish(record, out, table)
