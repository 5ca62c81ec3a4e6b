"""``python -m bench NAME [OPTIONS]``, from the repository root: the benchmarks that measure
kernelpilot. ``python -m bench --help`` lists them, ``python -m bench NAME --help`` shows one's
options. Each prints a table, and with ``--out FILE`` writes a results record
(bench/results_format.py)."""

from __future__ import annotations

import importlib
import os
import sys

import click

from bench import REPO_ENV

# NAME -> the module whose ``cli`` it runs. A module is imported only when its command runs
# (or --help lists them all): ``reference --repo DIR`` imports DIR's harness, and nothing of
# this checkout's harness may be imported before it.
BENCHMARKS = {
    "offline": "bench.bench_offline",
    "verify-overhead": "bench.bench_verify_overhead",
    "timer": "bench.bench_timer",
    "strategies": "bench.bench_strategies",
    "sandbox": "bench.bench_sandbox",
    "reference": "bench.bench_reference",
    "kb-sweep": "bench.kb_sweep",
    "real-repos": "bench.real_repos",
    "file-endpoint": "bench.file_endpoint",
    "real-model": "bench.real_model",
    "builds": "bench.bench_builds",
    "prompt-sizes": "bench.bench_prompt_sizes",
    "busy": "bench.bench_busy",
    "layouts": "bench.bench_layouts",
    "rows": "bench.bench_rows",
    "variants": "bench.bench_variants",
    "throughput": "bench.bench_throughput",
}


class Benchmarks(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHMARKS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in BENCHMARKS:
            return None
        return importlib.import_module(BENCHMARKS[cmd_name]).cli


@click.group(
    cls=Benchmarks,
    context_settings={"help_option_names": ["-h", "--help"], "terminal_width": 110},
)
def cli() -> None:
    """kernelpilot's benchmarks (run from the repository root)."""


def main() -> None:
    measured = os.environ.get(REPO_ENV)
    if measured:  # before any harness module is imported: DIR's harness is the one measured
        sys.path.insert(0, measured)
    cli(prog_name="python -m bench")


if __name__ == "__main__":
    main()
