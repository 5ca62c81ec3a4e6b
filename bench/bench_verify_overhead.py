"""What verification costs: kernelpilot's full check of an honest candidate vs a plain allclose.

Plain: import the (already built) candidate in this process, run it once, torch.allclose
against the reference. Full: Evaluator.evaluate with the smallest timing phase (3 timed
calls, no torch.compile), i.e. the static gate, the reference worker (cases, audit, profile),
the candidate worker (guards, poison, fingerprints, snapshots, profile, every-call re-check)
and the comparison. Both start from a warm build cache.

    python -m bench verify-overhead [--device cpu|cuda] [--out FILE]
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import click
import torch
from torch.utils import cpp_extension

from bench.results_format import BenchmarkRecord, finish, new_record, out_option
from harness.builds.cache import CachedLoader, default_cache_dir
from harness.config import EvalConfig
from harness.evaluate import Evaluator
from harness.problem.cases import build_reference, make_inputs
from harness.problem.load import problem_from_target
from harness.problem.user_code import init_arguments
from harness.records import Candidate

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def load_model_new(problem, path: Path, reference: torch.nn.Module) -> torch.nn.Module:
    """Import a candidate file in this process (trusted: our own fixtures and proposals) and
    build its ModelNew with the reference's parameters. Kernels come from the build cache:
    ``load_inline`` is the harness's CachedLoader, so a kernel built before is not rebuilt."""
    cpp_extension.load_inline = CachedLoader(default_cache_dir(), problem.device, problem.dtype)
    spec = importlib.util.spec_from_file_location("plain_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args, kwargs = init_arguments(problem)
    candidate = module.ModelNew(*args, **kwargs).to(problem.device)
    candidate.load_state_dict(reference.state_dict())
    return candidate


def plain_allclose(problem, path: Path) -> float:
    # Both sides start from the warm build cache (see load_model_new).
    start = time.perf_counter()
    reference = build_reference(problem, 0)
    candidate = load_model_new(problem, path, reference)
    inputs = make_inputs(problem, 0)
    with torch.no_grad():
        ok = torch.allclose(candidate(*inputs), reference(*inputs), atol=1e-5, rtol=1e-5)
    if problem.device == "cuda":
        torch.cuda.synchronize()
    assert ok
    return time.perf_counter() - start


@click.command("verify-overhead")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@out_option
def cli(device: str, out: Path | None) -> None:
    """What verification costs: kernelpilot's full check vs a plain allclose."""
    problem = problem_from_target(str(FIXTURES / "scale_problem.py"), device, "float32")
    path = FIXTURES / ("gpu_honest.py" if device == "cuda" else "isolation_honest.py")
    config = EvalConfig(
        compile_baseline=False, min_reps=3, max_reps=3, warmup=1, time_budget_s=0.01
    )
    evaluator = Evaluator(config, seed=5)
    evaluator.prebuild(problem, [Candidate(source=path.read_text())])  # warm cache, not timed
    plain_allclose(problem, path)  # warm this process's imports, not timed
    plain = plain_allclose(problem, path)
    start = time.perf_counter()
    result = evaluator.evaluate(problem, Candidate(source=path.read_text()))
    full = time.perf_counter() - start
    assert result.status.value == "ok", result.reason
    rows = [
        {"check": "plain allclose (1 input, in process)", "wall_s": plain},
        {
            "check": f"kernelpilot full verification ({len(result.checks)} checks, "
            "2 worker processes)",
            "wall_s": full,
        },
    ]
    finish(new_record("verify-overhead", device, rows), out, render)


def render(record: BenchmarkRecord) -> str:
    plain, full = (row["wall_s"] for row in record.rows)
    lines = [f"device {record.device}, torch {record.torch}", "| check | wall s |", "|---|---|"]
    lines += [f"| {row['check']} | {row['wall_s']:.2f} |" for row in record.rows]
    lines.append(
        f"\noverhead: {full / plain:.1f}x the plain check, {full - plain:.1f} s more per candidate"
    )
    return "\n".join(lines)
